"""The storage timeouts are settings: defaults that bound a request to a hung account,
overridable per variable, and refused when they make no sense."""

from __future__ import annotations

import pytest

from shared.errors import ConfigurationError
from shared.settings import StorageTimeouts, load_storage_settings, load_storage_timeouts


def test_the_defaults_bound_an_ingress_request_within_the_stated_15_seconds() -> None:
    timeouts = load_storage_timeouts({})
    assert timeouts == StorageTimeouts(connect=3.0, read=5.0, call=8.0, ingress=12.0)
    assert max(timeouts.connect, timeouts.read) <= timeouts.call <= timeouts.ingress <= 15


def test_each_timeout_is_read_from_its_variable() -> None:
    timeouts = load_storage_timeouts(
        {
            "BUS_STORAGE_CONNECT_TIMEOUT": "1",
            "BUS_STORAGE_READ_TIMEOUT": " 2.5 ",
            "BUS_STORAGE_CALL_TIMEOUT": "4",
            "BUS_INGRESS_TIMEOUT": "6",
        }
    )
    assert timeouts == StorageTimeouts(connect=1.0, read=2.5, call=4.0, ingress=6.0)


def test_the_storage_settings_carry_the_timeouts() -> None:
    settings = load_storage_settings(
        {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "BUS_STORAGE_CALL_TIMEOUT": "9"}
    )
    assert settings.timeouts.call == 9.0
    identity = load_storage_settings(
        {"AzureWebJobsStorage__accountName": "acct", "BUS_INGRESS_TIMEOUT": "20"}
    )
    assert identity.timeouts.ingress == 20.0


def test_an_empty_variable_means_the_default() -> None:
    assert load_storage_timeouts({"BUS_STORAGE_READ_TIMEOUT": " "}) == StorageTimeouts()


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf", "1e400", "5s"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="BUS_STORAGE_READ_TIMEOUT"):
        load_storage_timeouts({"BUS_STORAGE_READ_TIMEOUT": value})


@pytest.mark.parametrize(
    "environ",
    [
        {"BUS_STORAGE_READ_TIMEOUT": "9"},  # a read longer than the call it is part of
        {"BUS_STORAGE_CONNECT_TIMEOUT": "9"},
        {"BUS_STORAGE_CALL_TIMEOUT": "13"},  # a call longer than the request
        {"BUS_INGRESS_TIMEOUT": "7"},
    ],
)
def test_timeouts_that_do_not_nest_are_refused(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="must nest"):
        load_storage_timeouts(environ)
