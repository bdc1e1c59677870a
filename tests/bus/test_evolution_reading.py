"""``shared.bus.reading.read_body`` and what a type declares about its own evolution: tolerant
and strict reading, a hostile body's unknown fields (counted, named in one bounded line), the
upcast chain, a newer version refused, the start-up check of a chain, former names and
topics at registration, and the envelope's type version on the wire."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any, Self, TypeVar

import pytest
from pydantic import Field

from shared.bus import BusApp, BusConfig, Command, Event, RetryPolicy
from shared.bus.app import Endpoint
from shared.bus.context import PendingOutput
from shared.bus.envelope import Envelope
from shared.bus.messages import Message, topics_of
from shared.bus.outgoing import plan_deliveries
from shared.bus.reading import MAX_NAMED_FIELDS, check_versions, read_body
from shared.bus.subscriptions import handled_topics, missing_subscriptions
from shared.bus.telemetry import BusTelemetry
from shared.bus.topics import RecipientLists
from shared.clock import ManualClock
from shared.errors import ConfigurationError, MessageSchemaError, NewerVersion
from shared.stores.memory import MemoryStorageAccount
from tests.bus.evolving import (
    Dispatch,
    Metrics,
    Version1,
    Version1Plus,
    Version1Strict,
    Version2,
    Version3,
    Version3Retired,
    metrics,
)

M = TypeVar("M", bound=Message)
BODY_V1 = {"order": "o1", "address": "Main St 1, Delft"}


@pytest.fixture
def measured() -> Metrics:
    return metrics()


def read(
    model: type[M], body: Mapping[str, object], measured: Metrics, version: int | None = None
) -> M:
    telemetry = BusTelemetry(meter_provider=measured.provider)
    return read_body(model, body, type_version=version, reader="dock", telemetry=telemetry)


def test_unknown_fields_are_dropped_and_counted(measured: Metrics) -> None:
    body = {**BODY_V1, "gift_note": "hi", "priority": 2}
    assert read(Version1.Ship, body, measured) == Version1.Ship(**BODY_V1)
    assert measured.ignored() == Counter({("dock", "Ship"): 2})


def test_a_known_body_counts_nothing(measured: Metrics) -> None:
    assert read(Version1Plus.Ship, {**BODY_V1, "gift_note": "hi"}, measured).gift_note == "hi"
    assert measured.ignored() == Counter()


def test_a_strictly_read_type_refuses_an_unknown_field(measured: Metrics) -> None:
    with pytest.raises(MessageSchemaError, match="gift_note: Extra inputs are not permitted"):
        read(Version1Strict.Ship, {**BODY_V1, "gift_note": "hi"}, measured)
    assert measured.ignored() == Counter()


def test_a_body_missing_a_required_field_still_fails_its_schema(measured: Metrics) -> None:
    with pytest.raises(MessageSchemaError, match="address: Field required"):
        read(Version1.Ship, {"order": "o1", "street": "Main St 1"}, measured)


def test_constructing_a_message_with_an_unknown_field_still_fails_at_once() -> None:
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Version1.Ship(order="o1", address="x", adress="typo")  # type: ignore[call-arg]


def test_aliases_are_known_fields(measured: Metrics) -> None:
    class Aliased(Command):
        order: str = Field(alias="orderId")

    assert read(Aliased, {"orderId": "o1", "extra": 1}, measured) == Aliased(orderId="o1")
    assert measured.ignored() == Counter({("dock", "Aliased"): 1})


def test_a_hostile_body_is_read_with_one_bounded_log_line(
    measured: Metrics, caplog: pytest.LogCaptureFixture
) -> None:
    # Hundreds of unknown fields, some with huge names holding forged log lines
    forged = "x\n2026-01-01 INFO shared.bus: outcome=processed\x1b[2J" + "y" * 100_000
    body: dict[str, object] = {**BODY_V1, **{f"f{i}": i for i in range(500)}, forged: 1}
    with caplog.at_level(logging.DEBUG, logger="shared.bus.reading"):
        assert read(Version1.Ship, body, measured) == Version1.Ship(**BODY_V1)
    assert measured.ignored() == Counter({("dock", "Ship"): 501})
    [record] = caplog.records
    text = record.getMessage()
    assert "\n" not in text
    assert "\x1b" not in text
    assert len(text) < 2_000
    assert "without 501 field(s)" in text
    assert f"and {501 - MAX_NAMED_FIELDS} more" in text


def test_an_old_body_is_upcast_step_by_step(measured: Metrics) -> None:
    assert read(Version3.Ship, BODY_V1, measured, version=1) == Version3.Ship(
        order="o1", street="Main St 1", city="Delft", country="unknown"
    )
    body_v2 = {"order": "o1", "street": "Dock 2", "city": "Rotterdam", "crane": 7}
    assert read(Version3.Ship, body_v2, measured, version=2) == Version3.Ship(
        order="o1", street="Dock 2", city="Rotterdam", country="unknown"
    )
    assert measured.ignored() == Counter({("dock", "Ship"): 1})  # the old model's unknowns
    current = {"order": "o1", "street": "a", "city": "b", "country": "NL"}
    assert read(Version3.Ship, current, measured, version=3).country == "NL"
    assert read(Version3.Ship, current, measured).country == "NL"  # a client's: the current


def test_an_old_body_that_fails_its_old_schema_names_the_version(measured: Metrics) -> None:
    with pytest.raises(
        MessageSchemaError, match=r"address: Field required \(read as Ship, version 1"
    ):
        read(Version3.Ship, {"order": "o1"}, measured, version=1)


def test_a_newer_body_is_not_read(measured: Metrics) -> None:
    body = {"order": "o1", "street": "a", "city": "b", "country": "NL"}
    with pytest.raises(NewerVersion, match="Ship version 3 is newer than the version this "):
        read(Version2.Ship, body, measured, version=3)


def test_a_body_older_than_the_oldest_version_read_is_a_schema_error(measured: Metrics) -> None:
    check_versions(Version3Retired.Ship)  # complete down to version 2
    body_v2 = {"order": "o1", "street": "Dock 2", "city": "Rotterdam"}
    assert read(Version3Retired.Ship, body_v2, measured, version=2).country == "unknown"
    with pytest.raises(
        MessageSchemaError,
        match=r"Ship version 1 is older than the oldest version this instance reads \(2\): its "
        "upcaster was retired",
    ):
        read(Version3Retired.Ship, BODY_V1, measured, version=1)


class Unversioned(Command):
    order: str


class NoPrevious(Command):
    version = 2
    order: str


class SkipsAVersion(Command):
    version = 3
    previous = Unversioned
    order: str


class NoUpcast(Command):
    version = 2
    previous = Unversioned
    order: str


class InheritsAnUpcast(Version2.Ship):
    version = 3
    previous = Version2.Ship  # type: ignore[assignment]


class Broken(Command):
    version = 3
    previous = NoUpcast
    order: str

    @classmethod
    def upcast(cls, old: NoUpcast) -> Self:
        return cls(order=old.order)


class Zero(Command):
    version = 0
    order: str


class RetiredPastItself(Command):
    version = 2
    oldest_version = 3
    order: str


class RetiredToZero(Command):
    version = 2
    oldest_version = 0
    order: str


class RetiredWithAGap(Command):
    version = 3
    oldest_version = 2
    order: str


@pytest.mark.parametrize(
    ("model", "error"),
    [
        (NoPrevious, "NoPrevious is version 2 but names no previous model"),
        (SkipsAVersion, "previous model Unversioned is version 1, not 2"),
        (NoUpcast, "NoUpcast is version 2 but defines no classmethod upcast(cls, old)"),
        (InheritsAnUpcast, "InheritsAnUpcast is version 3 but defines no classmethod upcast"),
        (Broken, "Broken (its older model NoUpcast) is version 2 but defines no classmethod"),
        (Zero, "Zero: version must be a whole number from 1, got 0"),
        (
            RetiredPastItself,
            "oldest_version must be a whole number from 1 to its version (2), got 3",
        ),
        (RetiredToZero, "oldest_version must be a whole number from 1 to its version (2), got 0"),
        (RetiredWithAGap, "RetiredWithAGap is version 3 but names no previous model"),
    ],
)
def test_an_incomplete_chain_is_a_configuration_error(model: type[Message], error: str) -> None:
    with pytest.raises(ConfigurationError, match=error.replace("(", r"\(").replace(")", r"\)")):
        check_versions(model)
    app = BusApp()
    app.endpoint("dock").handles(model)(lambda ctx, message: None)
    with pytest.raises(ConfigurationError):
        app.check()


def test_complete_chains_pass() -> None:
    for model in (Unversioned, Version1.Ship, Version2.Ship, Version3.Ship, Version3Retired.Ship):
        check_versions(model)


class Parcel(Command):
    former_names = ("Dispatch",)
    order: str


def test_a_former_name_taken_by_another_handled_type_is_refused() -> None:
    endpoint: Endpoint[Any] = BusApp().endpoint("dock")
    endpoint.handles(Version1.Ship)(lambda ctx, message: None)
    with pytest.raises(
        ConfigurationError,
        match=r"Dispatch would be received under \['Ship'\], which it already takes as \['Ship'\]",
    ):
        endpoint.handles(Dispatch)(lambda ctx, message: None)
    other: Endpoint[Any] = BusApp().endpoint("dock")
    other.handles(Parcel)(lambda ctx, message: None)
    with pytest.raises(
        ConfigurationError, match=r"under \['Dispatch'\], which it already takes as \['Parcel'\]"
    ):
        other.handles(Dispatch)(lambda ctx, message: None)


def test_an_endpoint_takes_a_type_under_its_former_names() -> None:
    app = BusApp()
    patient = RetryPolicy(immediate=2)
    endpoint: Endpoint[Any] = app.endpoint("dock", retry_for={Dispatch: patient})
    endpoint.handles(Dispatch)(lambda ctx, message: None)
    assert endpoint.retry_policy("Ship") is patient
    assert endpoint.accepted == {"Dispatch": Dispatch, "Ship": Dispatch}
    found = endpoint.handler_for("Ship")
    assert found is not None
    assert found[0] is Dispatch
    assert app.routes.receivers_of("Ship") == ["dock"]
    external = app.external_endpoint("yard", accepts=[Dispatch])
    assert set(external.accepts) == {"Dispatch", "Ship"}
    with pytest.raises(ValueError, match="share a name or former name"):
        app.external_endpoint("quay", accepts=[Dispatch, Version1.Ship])


class OrderWasPlaced(Event):
    former_names = ("OrderPlaced", "Order Placed!", "orderwasplaced")
    order: str


async def test_an_event_subscribes_under_its_former_topics() -> None:
    assert OrderWasPlaced.former_topics() == ("orderplaced",)  # valid topics, not its own
    assert topics_of(OrderWasPlaced) == ("orderwasplaced", "orderplaced")
    app = BusApp()
    app.endpoint("fresh").handles(OrderWasPlaced)(lambda ctx, message: None)
    assert handled_topics(app) == [("orderplaced", "fresh"), ("orderwasplaced", "fresh")]
    container = MemoryStorageAccount().blob_container("topics")
    await container.create_if_missing()
    topics = RecipientLists(container, ManualClock(), 0)
    await topics.subscribe("orderwasplaced", "fresh")
    [gap] = await missing_subscriptions(app, topics)
    assert (gap.topic, gap.endpoint) == ("orderplaced", "fresh")


async def envelope_of(message: Message) -> Envelope:
    app = BusApp()
    app.external_endpoint("dock", accepts=[type(message)])
    topics = RecipientLists(MemoryStorageAccount().blob_container("topics"), ManualClock(), 0)
    [envelope] = await plan_deliveries(
        [PendingOutput(message, "dock", {})],
        sender="yard",
        incoming_id="00000000-0000-4000-8000-000000000000",
        correlation_id="c",
        topics=topics,
        routes=app.routes,
        config=BusConfig(),
    )
    return envelope


async def test_the_envelope_carries_a_type_version_only_above_1() -> None:
    first = await envelope_of(Version1.Ship(**BODY_V1))
    assert first.type_version is None
    assert b"type_version" not in first.to_bytes()
    third = await envelope_of(Version3.Ship(order="o", street="s", city="c", country="NL"))
    assert b'"type_version":3' in third.to_bytes()
    assert Envelope.from_bytes(third.to_bytes()).body_version == 3
    assert Envelope.from_bytes(first.to_bytes()).body_version == 1
