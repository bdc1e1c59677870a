"""The product's performer retries a call whose outcome is unknown on its own policy
(BUS_EFFECT_RETRIES), with backoff and the same key, instead of the host's few quick
redeliveries: a provider down for an hour must not park every charge."""

from __future__ import annotations

import pytest

from shared.bus.effects import PERFORMER_ENDPOINT, EffectRequest
from shared.config import build_config
from shared.errors import ConfigurationError
from shared.settings import resolve_settings
from tests.effects.test_wiring import REPO, shop, worker

URL = {"BUS_SERVICE_CARD_PAYMENTS_URL": "http://127.0.0.1:9"}


def test_the_default_policy_backs_off_from_ten_seconds_to_an_hour_over_about_three_hours() -> None:
    built = worker(shop(), **URL)

    policy = built.app.get(PERFORMER_ENDPOINT).retry_policy(EffectRequest.type_name())

    assert policy is not None
    assert policy.immediate == 0
    assert policy.delays == (10.0, 30.0, 90.0, 270.0, 810.0, 2430.0, 3600.0, 3600.0)
    assert 2.9 * 3600 < sum(policy.delays) < 3.2 * 3600


def test_the_number_of_retries_is_an_app_setting() -> None:
    built = worker(shop(), BUS_EFFECT_RETRIES="2", **URL)

    policy = built.app.get(PERFORMER_ENDPOINT).retry_policy(EffectRequest.type_name())

    assert policy is not None
    assert policy.delays == (10.0, 30.0)


@pytest.mark.parametrize("value", ["-1", "101", "many", "2.5"])
def test_a_bad_number_of_retries_stops_start_up_naming_the_setting(value: str) -> None:
    settings = resolve_settings(environ={"BUS_EFFECT_RETRIES": value, **URL}, local_file=None)
    with pytest.raises(ConfigurationError, match="BUS_EFFECT_RETRIES"):
        build_config(settings, root=REPO)
