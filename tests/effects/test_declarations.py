"""Declaring external services (``BusApp.service``): what a declaration accepts and refuses."""

from __future__ import annotations

import math

import pytest

from shared.bus import BusApp
from shared.bus.effects import ServiceDeclaration
from shared.effects.memory import InMemoryProvider
from shared.effects.performer import add_performer
from shared.errors import ConfigurationError, InvalidName, UndeclaredService


def test_a_declared_service_names_its_operations_paths() -> None:
    app = BusApp()
    declared = app.service("payments", operations={"charge": "/v1/charges"}, timeout_seconds=3)
    assert app.services == {"payments": declared}
    assert declared.path("charge") == "/v1/charges"
    assert not declared.at_most_once
    assert declared.idempotency_header == "Idempotency-Key"
    assert (declared.in_progress_statuses, declared.key_reused_statuses) == ({409}, {422})


def test_a_service_declares_which_statuses_mean_in_progress_and_key_reused() -> None:
    app = BusApp()
    declared = app.service(
        "payments",
        operations={"charge": "/v1/charges"},
        in_progress_statuses=[409, 425],
        key_reused_statuses=(400,),
    )
    assert declared.in_progress_statuses == frozenset({409, 425})
    assert declared.key_reused_statuses == frozenset({400})


@pytest.mark.parametrize(
    ("statuses", "problem"),
    [
        ({200}, "4xx statuses only"),
        ({503}, "4xx statuses only"),
        ({True}, "4xx statuses only"),
        ({"409"}, "4xx statuses only"),
        ("409", "a set of statuses"),
        (409, "a set of statuses"),
    ],
)
def test_declared_statuses_are_client_errors(statuses: object, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        ServiceDeclaration("payments", {"charge": "/c"}, in_progress_statuses=statuses)  # type: ignore[arg-type]


def test_a_status_cannot_mean_both_in_progress_and_key_reused() -> None:
    with pytest.raises(ConfigurationError, match=r"\[409\] cannot mean both"):
        ServiceDeclaration("payments", {"charge": "/c"}, key_reused_statuses={409})


def test_an_undeclared_operation_is_refused() -> None:
    declared = ServiceDeclaration("payments", {"charge": "/v1/charges"})
    with pytest.raises(UndeclaredService, match="no operation 'refund'"):
        declared.path("refund")


@pytest.mark.parametrize(
    "path", ["v1/charges", "https://evil.example/x", "//evil.example/x", "/a b", "/a?b=1", ""]
)
def test_a_path_is_a_plain_path_under_the_base_address(path: str) -> None:
    with pytest.raises(ConfigurationError, match="needs a path"):
        ServiceDeclaration("payments", {"charge": path})


@pytest.mark.parametrize("timeout", [0, -1, math.inf, math.nan])
def test_a_timeout_is_a_positive_finite_number(timeout: float) -> None:
    with pytest.raises(ConfigurationError, match="timeout_seconds"):
        ServiceDeclaration("payments", {"charge": "/c"}, timeout_seconds=timeout)


def test_names_and_headers_are_checked() -> None:
    with pytest.raises(InvalidName):
        ServiceDeclaration("Pay Ments", {"charge": "/c"})
    with pytest.raises(InvalidName):
        ServiceDeclaration("payments", {"Charge!": "/c"})
    with pytest.raises(ConfigurationError, match="not a header name"):
        ServiceDeclaration("payments", {"charge": "/c"}, idempotency_header="Key\r\nX-Evil: 1")
    with pytest.raises(ConfigurationError, match="at least one operation"):
        ServiceDeclaration("payments", {})


def test_a_service_is_declared_once() -> None:
    app = BusApp()
    app.service("payments", operations={"charge": "/c"})
    with pytest.raises(ValueError, match="declared twice"):
        app.service("payments", operations={"refund": "/r"})


def test_the_performer_needs_a_provider_for_every_declared_service() -> None:
    app = BusApp()
    app.service("payments", operations={"charge": "/c"})
    with pytest.raises(
        ConfigurationError, match=r"no provider for the declared services \['payments'\]"
    ):
        add_performer(app, {"mail": InMemoryProvider()}, call_timeout=1.0)
