"""Connection settings follow the Azure Functions conventions; every setting is resolved
with one precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.errors import ConfigurationError
from shared.settings import (
    DEV_CONNECTION_STRING,
    STORAGE_SETTING_NAME,
    load_storage_settings,
    parse_connection_string,
    resolve_settings,
)


def test_development_storage_means_the_local_emulator() -> None:
    settings = load_storage_settings({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})
    assert settings.connection_string == DEV_CONNECTION_STRING
    assert not settings.uses_identity


def test_a_connection_string_is_used_as_given_and_never_described_with_its_key() -> None:
    value = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0PT0=;"
    settings = load_storage_settings({"AzureWebJobsStorage": value})
    assert settings.connection_string == value
    assert "c2VjcmV0" not in settings.describe()
    assert parse_connection_string(value)["AccountKey"] == "c2VjcmV0PT0="


def test_identity_based_service_uris() -> None:
    settings = load_storage_settings(
        {
            "Bus__blobServiceUri": "https://a.blob.core.windows.net",
            "Bus__queueServiceUri": "https://a.queue.core.windows.net",
            "Bus__tableServiceUri": "https://a.table.core.windows.net",
            "Bus__credential": "managedidentity",
            "Bus__clientId": "1234",
        },
        setting="Bus",
    )
    assert settings.uses_identity
    assert settings.managed_identity
    assert settings.client_id == "1234"
    assert settings.table_service_uri == "https://a.table.core.windows.net"


def test_account_name_alone_derives_the_public_endpoints() -> None:
    settings = load_storage_settings({"AzureWebJobsStorage__accountName": "acct"})
    assert settings.blob_service_uri == "https://acct.blob.core.windows.net"
    assert settings.queue_service_uri == "https://acct.queue.core.windows.net"
    assert not settings.managed_identity


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "no storage connection configured"),
        ({"AzureWebJobsStorage__blobServiceUri": "https://a"}, "missing: queue, table"),
        ({"AzureWebJobsStorage": "not a connection string"}, "no '='"),
        ({"AzureWebJobsStorage": "Foo=bar"}, "not a storage connection string"),
        (
            {"AzureWebJobsStorage__accountName": "a", "AzureWebJobsStorage__credential": "cli"},
            "credential",
        ),
    ],
)
def test_bad_settings_fail_with_a_message_naming_the_fix(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_storage_settings(environ)


# --- the one resolver ------------------------------------------------------------------------


def write_local_settings(folder: Path, values: dict[str, str]) -> Path:
    path = folder / "local.settings.json"
    path.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
    return path


def test_precedence_is_command_line_then_environment_then_local_settings_then_defaults(
    tmp_path: Path,
) -> None:
    local = write_local_settings(tmp_path, {"A": "file", "B": "file", "C": "file"})
    settings = resolve_settings(
        {"A": "option", "B": None}, environ={"A": "env", "B": "env"}, local_file=local
    )
    assert [settings.get(n) for n in "ABC"] == ["option", "env", "file"]
    assert [settings.origin(n) for n in "ABC"] == ["command line", "environment", str(local)]
    assert settings.get(STORAGE_SETTING_NAME) == "AzureWebJobsStorage"
    assert settings.origin(STORAGE_SETTING_NAME) == "defaults"
    assert settings.origin("D") == "unset"


def test_an_empty_value_does_not_hide_a_lower_source(tmp_path: Path) -> None:
    local = write_local_settings(tmp_path, {"BUS_APP": "shop.app:app"})
    settings = resolve_settings(environ={"BUS_APP": " "}, local_file=local)
    assert settings.get("BUS_APP") == "shop.app:app"


def test_the_connection_comes_from_local_settings_when_the_environment_has_none(
    tmp_path: Path,
) -> None:
    local = write_local_settings(tmp_path, {"AzureWebJobsStorage": "UseDevelopmentStorage=true"})
    settings = resolve_settings(environ={}, local_file=local)
    assert settings.storage().connection_string == DEV_CONNECTION_STRING


def test_identity_based_parts_count_as_a_configured_connection(tmp_path: Path) -> None:
    local = write_local_settings(tmp_path, {"Shop__accountName": "shopacct"})
    settings = resolve_settings({STORAGE_SETTING_NAME: "Shop"}, environ={}, local_file=local)
    assert settings.storage().queue_service_uri == "https://shopacct.queue.core.windows.net"


def test_a_setting_name_that_nothing_sets_is_an_error_never_the_emulator() -> None:
    settings = resolve_settings(
        {STORAGE_SETTING_NAME: "AzureWebJobsStorag"},  # a typo
        environ={"AzureWebJobsStorage": "UseDevelopmentStorage=true"},
        local_file=None,
    )
    with pytest.raises(ConfigurationError) as raised:
        settings.storage()
    message = str(raised.value)
    assert "AzureWebJobsStorag (named by the command line) is not set" in message
    assert "command line or environment" in message


def test_no_connection_at_all_is_an_error_that_says_how_to_use_the_emulator() -> None:
    with pytest.raises(ConfigurationError, match="AzureWebJobsStorage=UseDevelopmentStorage=true"):
        resolve_settings(environ={}, local_file=None).storage()


@pytest.mark.parametrize("text", ["{", '{"Values": []}', "[]"])
def test_an_unreadable_local_settings_file_is_a_configuration_error(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "local.settings.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=r"local\.settings\.json"):
        resolve_settings(environ={}, local_file=path)
