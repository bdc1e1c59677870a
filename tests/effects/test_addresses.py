"""The declared services' addresses and credentials, read once at start-up into AppConfig
(``shared.effects.addresses``), and the cap on a call's timeout derived from host.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lab.host.host import HostConfig
from shared.config import AppConfig, build_config
from shared.effects.addresses import (
    STORAGE_CALLS_PER_RECEIVE,
    Credential,
    EffectSettings,
    credential_setting,
    url_setting,
)
from shared.errors import ConfigurationError
from tests.conftest import sample_settings

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk_live_0123456789abcdef"


def config(root: Path = REPO, **values: str) -> AppConfig:
    return build_config(sample_settings(**values), root=root)


def test_the_setting_names_follow_the_service_name() -> None:
    assert url_setting("card-payments") == "BUS_SERVICE_CARD_PAYMENTS_URL"
    assert credential_setting("payments") == "BUS_SERVICE_PAYMENTS_CREDENTIAL"


def test_a_services_address_and_credential_reach_the_app_config() -> None:
    built = config(
        BUS_SERVICE_CARD_PAYMENTS_URL="https://api.example.com/stripe/",
        BUS_SERVICE_CARD_PAYMENTS_CREDENTIAL=SECRET,
        BUS_SERVICE_LEDGER_URL="http://127.0.0.1:8080",
    )
    payments = built.effects.address_of("card-payments")
    assert payments.url == "https://api.example.com/stripe"
    assert payments.credential is not None
    assert payments.credential.authorization() == f"Bearer {SECRET}"
    assert built.effects.address_of("ledger").credential is None


def test_a_credential_is_never_in_the_text_of_what_holds_it() -> None:
    built = config(
        BUS_SERVICE_PAYMENTS_URL="https://x.example", BUS_SERVICE_PAYMENTS_CREDENTIAL=SECRET
    )
    address = built.effects.address_of("payments")
    for text in (str(Credential(SECRET)), repr(address), str(address), repr(built.effects)):
        assert SECRET not in text
    assert address.credential == Credential(SECRET)


def test_a_declared_service_without_its_url_is_an_error_naming_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="set the app setting BUS_SERVICE_PAYMENTS_URL"):
        EffectSettings().address_of("payments")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://files.example.com", "must start with https://"),
        ("https://", "names no host"),
        ("https://user:" + SECRET + "@api.example.com", "user information"),
        ("https://api.example.com/v1?token=" + SECRET, "query or a fragment"),
        ("https://api.example.com/#" + SECRET, "query or a fragment"),
        ("https://api.example.com:port" + SECRET, "not a URL"),
        ("https://api.example.com/\n" + SECRET, "control or non-ASCII"),
        ("http://api.example.com", "plain http is accepted only to localhost"),
        ("http://10.0.0.5:8080", "plain http is accepted only to localhost"),
        ("api.example.com", "must start with https://"),
    ],
)
def test_a_bad_address_stops_start_up_without_showing_it(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        config(BUS_SERVICE_PAYMENTS_URL=url)
    text = str(refused.value)
    assert "app setting BUS_SERVICE_PAYMENTS_URL (from the environment)" in text
    assert why in text
    assert SECRET not in text
    assert url not in text


@pytest.mark.parametrize(
    "url", ["http://localhost:7071", "http://127.0.0.1", "http://[::1]:9000/base/", "https://a.b"]
)
def test_plain_http_is_accepted_to_this_machine_and_https_anywhere(url: str) -> None:
    assert config(BUS_SERVICE_PAYMENTS_URL=url).effects.address_of("payments").url == url.rstrip(
        "/"
    )


@pytest.mark.parametrize("setting", ["BUS_SERVICE_PAYMENTS_URL", "BUS_SERVICE_PAYMENTS_CREDENTIAL"])
def test_an_unresolved_key_vault_reference_stops_start_up_without_showing_it(setting: str) -> None:
    reference = f"@Microsoft.KeyVault(SecretUri=https://vault.vault.azure.net/secrets/{SECRET}/)"
    values = {"BUS_SERVICE_PAYMENTS_URL": "https://api.example.com", setting: reference}
    with pytest.raises(ConfigurationError, match=f"{setting} .*Key Vault reference") as refused:
        config(REPO, **values)
    assert SECRET not in str(refused.value)


def test_the_answer_limit_is_a_setting() -> None:
    assert config().effects.answer_max_bytes == 65536
    assert config(BUS_EFFECT_ANSWER_MAX_BYTES="1024").effects.answer_max_bytes == 1024
    with pytest.raises(ConfigurationError, match="BUS_EFFECT_ANSWER_MAX_BYTES"):
        config(BUS_EFFECT_ANSWER_MAX_BYTES="0")


def host_json(root: Path, function_timeout: str | None) -> Path:
    host = json.loads((REPO / "host.json").read_text())
    host.pop("functionTimeout", None)
    if function_timeout is not None:
        host["functionTimeout"] = function_timeout
    (root / "host.json").write_text(json.dumps(host))
    return root


def test_the_call_cap_leaves_the_receives_storage_calls_their_time(tmp_path: Path) -> None:
    """The repository's host.json: 5 minutes, less 8 storage calls of 8 s."""
    assert config().effects.call_cap_seconds == 300 - STORAGE_CALLS_PER_RECEIVE * 8
    root = host_json(tmp_path, "00:02:00")
    assert config(root, BUS_STORAGE_CALL_TIMEOUT="5").effects.call_cap_seconds == 120 - 8 * 5


def test_without_a_function_timeout_the_consumption_default_applies(tmp_path: Path) -> None:
    assert config(host_json(tmp_path, None)).effects.call_cap_seconds == 300 - 8 * 8
    assert config(tmp_path / "elsewhere").effects.call_cap_seconds == 300 - 8 * 8


def test_an_unbounded_function_timeout_leaves_only_the_declared_timeouts(tmp_path: Path) -> None:
    assert math.isinf(config(host_json(tmp_path, "-1")).effects.call_cap_seconds)


def test_a_bad_function_timeout_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="time span"):
        config(host_json(tmp_path, "five minutes"))


def test_the_local_host_ends_an_invocation_at_the_timeout_the_cap_comes_from(
    tmp_path: Path,
) -> None:
    root = host_json(tmp_path, "00:01:40")
    assert HostConfig.from_host_json(root / "host.json").function_timeout == 100
    assert config(root).effects.call_cap_seconds == 100 - 8 * 8
