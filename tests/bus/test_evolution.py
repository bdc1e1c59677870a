"""Messages that change between versions of an app, received while both versions run (issue
29): a field a newer sender added is dropped by an older receiver (and counted) unless its
type reads strictly, a field a newer receiver removed is dropped too, an older body is upcast
version by version on receive and on replay, and a newer one is not processed. Every mode on
the in-memory stores; token mode on Azurite and with its state in PostgreSQL."""

from __future__ import annotations

from collections import Counter

import pytest

from shared.bus import Command, Outcome
from shared.bus.app import Mode
from shared.bus.envelope import Envelope, Signal
from shared.resources import poison_queue
from tests.bus.evolving import (
    Shipments,
    Version1,
    Version1Plus,
    Version1Strict,
    Version2,
    Version3,
    Version3Retired,
    metrics,
    receiving_app,
    sending_client,
)
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.test_retries import deliver_visible
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize(
    "backend", backend_modes(azurite=["token"], sql=True), indirect=True
)


async def receiver(
    backend: Backend, mode: Mode, model: type[Command], **config: object
) -> tuple[Harness, str, Counter[str]]:
    runs: Counter[str] = Counter()
    name = f"dock{unique_name('')[:8]}"
    harness = await Harness.create(backend, receiving_app(name, mode, model, runs), **config)
    return harness, name, runs


async def seen(harness: Harness, name: str, order: str) -> list[str]:
    return (await harness.applied_state(name, order, Shipments)).seen


async def schema_error(harness: Harness, name: str) -> str:
    """The reason of the one message parked at ``name``, which must be a schema error."""
    [parked] = await harness.poison_messages(name)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    assert reason["error_type"] == "MessageSchemaError"
    return str(reason["reason"])


async def test_a_field_a_newer_sender_added_is_dropped_and_counted(
    backend: Backend, mode: Mode
) -> None:
    # Given a receiver of version 1 and a sender whose Ship has an optional gift note
    measured = metrics()
    harness, name, runs = await receiver(
        backend, mode, Version1.Ship, meter_provider=measured.provider
    )
    newer = sending_client(harness.setup_bus, [name], Version1Plus.Ship)
    message = Version1Plus.Ship(order="o1", address="Main St 1, Delft", gift_note="hi")
    await newer.send(message, to=name, idempotency_key="o1")

    # When it is delivered
    outcomes = await deliver_visible(harness, name)

    # Then it is processed once without the field, and the field is counted as ignored
    assert outcomes == Counter({Outcome.PROCESSED: 1})
    assert runs == Counter({"Ship": 1})
    assert await seen(harness, name, "o1") == ["order=o1|address=Main St 1, Delft"]
    assert measured.ignored() == Counter({(name, "Ship"): 1})


async def test_a_strictly_read_type_parks_a_body_with_a_field_it_does_not_know(
    backend: Backend, mode: Mode
) -> None:
    harness, name, runs = await receiver(backend, mode, Version1Strict.Ship)
    newer = sending_client(harness.setup_bus, [name], Version1Plus.Ship)
    message = Version1Plus.Ship(order="o1", address="Main St 1, Delft", gift_note="hi")
    await newer.send(message, to=name, idempotency_key="o1")

    outcomes = await deliver_visible(harness, name)

    assert outcomes == Counter({Outcome.POISONED: 1})
    assert runs == Counter()
    assert "gift_note: Extra inputs are not permitted" in await schema_error(harness, name)


async def test_a_field_the_receiver_removed_is_dropped(backend: Backend, mode: Mode) -> None:
    # Given a receiver whose Ship no longer has the gift note an older sender still writes
    harness, name, runs = await receiver(backend, mode, Version1.Ship)
    older = sending_client(harness.setup_bus, [name], Version1Plus.Ship)
    await older.send(
        Version1Plus.Ship(order="o2", address="Dock 2, Rotterdam", gift_note=None),
        to=name,
        idempotency_key="o2",
    )

    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 1})
    assert runs == Counter({"Ship": 1})
    assert await seen(harness, name, "o2") == ["order=o2|address=Dock 2, Rotterdam"]


async def test_bodies_of_versions_1_and_2_are_upcast_to_version_3(
    backend: Backend, mode: Mode
) -> None:
    harness, name, runs = await receiver(backend, mode, Version3.Ship)
    first = sending_client(harness.setup_bus, [name], Version1.Ship)
    await first.send(
        Version1.Ship(order="o1", address="Main St 1, Delft"), to=name, idempotency_key="a"
    )
    second = sending_client(harness.setup_bus, [name], Version2.Ship)
    await second.send(
        Version2.Ship(order="o1", street="Dock 2", city="Rotterdam"), to=name, idempotency_key="b"
    )

    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 2})
    assert runs == Counter({"Ship": 2})
    assert sorted(await seen(harness, name, "o1")) == [
        "order=o1|street=Dock 2|city=Rotterdam|country=unknown",
        "order=o1|street=Main St 1|city=Delft|country=unknown",
    ]


async def test_a_body_older_than_the_oldest_version_read_is_parked_at_once(
    backend: Backend, mode: Mode
) -> None:
    # Given a receiver that retired version 1's upcaster, and a message of version 1 still
    # waiting (an upgraded instance cannot read it either: not a give-back)
    harness, name, runs = await receiver(backend, mode, Version3Retired.Ship)
    older = sending_client(harness.setup_bus, [name], Version1.Ship)
    await older.send(
        Version1.Ship(order="o1", address="Main St 1, Delft"), to=name, idempotency_key="o1"
    )

    outcomes = await deliver_visible(harness, name)

    assert outcomes == Counter({Outcome.POISONED: 1})
    assert runs == Counter()
    reason = await schema_error(harness, name)
    assert "older than the oldest version this instance reads (2)" in reason


async def test_a_body_of_a_newer_version_is_not_processed(backend: Backend, mode: Mode) -> None:
    # Given a receiver still on version 2 and a sender already on version 3
    harness, name, runs = await receiver(backend, mode, Version2.Ship)
    newer = sending_client(harness.setup_bus, [name], Version3.Ship)
    message = Version3.Ship(order="o4", street="Quay 4", city="Leiden", country="NL")
    await newer.send(message, to=name, idempotency_key="n")
    [waiting] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
    token = await harness.raw.blob_container(harness.config.tokens_container).read(
        Signal.parse(waiting.content).token
    )
    assert Envelope.from_bytes(token.data).type_version == 3

    # When the old instance receives it, it gives it back unread: nothing runs or is written
    assert await harness.bus.receive(name, waiting.content) == Outcome.GIVEN_BACK
    assert await harness.raw.queue(poison_queue(name)).approximate_count() == 0
    assert runs == Counter()
    assert await seen(harness, name, "o4") == []
    assert await harness.audit_ids(name) == []
    assert len(await harness.tokens()) == 1
