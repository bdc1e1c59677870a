"""Renamed message types while both names are in use (issue 29): a command sent under its
former name is handled by the renamed class; an event published under its former topic
reaches the endpoints of the renamed one, and a publish of the renamed event reaches an
endpoint subscribed only under the former topic, each once. Every mode on the in-memory
stores; token mode on Azurite and with its state in PostgreSQL. The HTTP ingress takes the
former name too, and reads a body with a field it does not know."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from shared import http_ingress
from shared.bus import BusApp, Command, Event, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.bus.messages import Message
from tests.bus.evolving import Dispatch, Shipments, Version1, line, metrics, sending_client
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


class Older:
    class Placed(Event):
        partition_by = "order"
        order: str


class OrderPlaced(Event):
    """``Older.Placed`` renamed: its topic was ``placed``."""

    partition_by = "order"
    former_names = ("Placed",)
    order: str


def renamed_app(mode: Mode, runs: Counter[str]) -> tuple[BusApp, list[str]]:
    """``dock`` handles Dispatch; ``fresh`` and ``legacy`` handle OrderPlaced."""
    suffix = unique_name("")[:8]
    names = [f"dock{suffix}", f"fresh{suffix}", f"legacy{suffix}"]
    app = BusApp()
    models: list[type[Message]] = [Dispatch, OrderPlaced, OrderPlaced]
    for name, model in zip(names, models, strict=True):
        endpoint = app.endpoint(name, state=Shipments, mode=mode)

        def note(ctx: HandlerContext[Shipments], message: Command | Event, at: str = name) -> None:
            runs[f"{at} {message.type_name()}"] += 1
            ctx.state.seen.append(line(message))

        endpoint.handles(model)(note)
    return app, names


async def delivered(harness: Harness, names: list[str]) -> Counter[Outcome]:
    outcomes: Counter[Outcome] = Counter()
    for name in names:
        outcomes += await deliver_visible(harness, name)
    return outcomes


async def test_a_command_sent_under_its_former_name_is_handled_by_the_renamed_class(
    backend: Backend, mode: Mode
) -> None:
    runs: Counter[str] = Counter()
    app, [dock, *_] = renamed_app(mode, runs)
    harness = await Harness.create(backend, app)
    older = sending_client(harness.setup_bus, [dock], Version1.Ship)
    await older.send(Version1.Ship(order="o1", address="Quay 1"), to=dock, idempotency_key="o1")

    assert await deliver_visible(harness, dock) == Counter({Outcome.PROCESSED: 1})
    assert runs == Counter({f"{dock} Dispatch": 1})
    assert (await harness.applied_state(dock, "o1", Shipments)).seen == ["order=o1|address=Quay 1"]


async def test_an_event_published_under_its_former_topic_reaches_the_renamed_handlers(
    backend: Backend, mode: Mode
) -> None:
    # Given the new version's endpoints, subscribed to the event's topic and its former one
    runs: Counter[str] = Counter()
    app, [_, fresh, legacy] = renamed_app(mode, runs)
    harness = await Harness.create(backend, app)
    assert await harness.setup_bus.topics.subscribers("placed") == (fresh, legacy)

    # When a publisher of the old version publishes the event under its old name
    publisher = sending_client(harness.setup_bus, [fresh, legacy], Older.Placed)
    await publisher.publish(Older.Placed(order="o2"), idempotency_key="o2")

    # Then each endpoint handles it once, as OrderPlaced
    assert await delivered(harness, [fresh, legacy]) == Counter({Outcome.PROCESSED: 2})
    assert runs == Counter({f"{fresh} OrderPlaced": 1, f"{legacy} OrderPlaced": 1})


async def test_a_publish_reaches_an_endpoint_subscribed_only_under_the_former_topic_once(
    backend: Backend, mode: Mode
) -> None:
    # Given legacy subscribed only under the former topic (as the old version subscribed
    # it) and fresh under both
    runs: Counter[str] = Counter()
    app, [_, fresh, legacy] = renamed_app(mode, runs)
    harness = await Harness.create(backend, app)
    await harness.setup_bus.topics.unsubscribe("orderplaced", legacy)
    assert await harness.setup_bus.topics.subscribers("orderplaced") == (fresh,)
    assert await harness.setup_bus.topics.subscribers("placed") == (fresh, legacy)

    # When the renamed event is published
    await harness.setup_bus.client().publish(OrderPlaced(order="o3"), idempotency_key="o3")

    # Then both get it, each once, under its current name
    assert await delivered(harness, [fresh, legacy]) == Counter({Outcome.PROCESSED: 2})
    assert runs == Counter({f"{fresh} OrderPlaced": 1, f"{legacy} OrderPlaced": 1})
    for name in (fresh, legacy):
        assert await harness.audit_ids(name) != []


async def test_the_http_ingress_takes_a_former_name_and_drops_an_unknown_field(
    backend: Backend, mode: Mode
) -> None:
    measured = metrics()
    runs: Counter[str] = Counter()
    app, [dock, *_] = renamed_app(mode, runs)
    harness = await Harness.create(backend, app, meter_provider=measured.provider)
    request = {
        "type": "Ship",
        "to": dock,
        "body": {"order": "o4", "address": "Quay 4", "gift_note": "hi", "priority": 2},
    }

    answer = await http_ingress.handle(
        harness.setup_bus, {"Idempotency-Key": "o4"}, json.dumps(request).encode()
    )

    assert answer.status == 202, answer.body
    assert await deliver_visible(harness, dock) == Counter({Outcome.PROCESSED: 1})
    assert runs == Counter({f"{dock} Dispatch": 1})
    assert measured.ignored() == Counter({(http_ingress.CLIENT_READER, "Dispatch"): 2})
