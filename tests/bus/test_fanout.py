"""An event with more subscribers than one table property lists signals for (about 100):
published from a handler and from a client, each subscriber processes it exactly once, and
what no outbox record could list is refused before anything is sent."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.ids import derived_id
from shared.clock import ManualClock
from shared.errors import MessageTooLarge
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name


class Announce(Command):
    partition_by = "topic_key"
    topic_key: str


class Announced(Event):
    partition_by = "topic_key"
    topic_key: str


class Seen(BaseModel):
    applied: list[str] = []


def fanout_app(suffix: str, subscribers: int) -> BusApp:
    """``hub`` publishes Announced when told to; every ``sub<n>`` endpoint handles it."""
    app = BusApp()
    hub = app.endpoint(f"hub{suffix}", state=Seen)

    @hub.handles(Announce)
    def announce(ctx: HandlerContext[Seen], cmd: Announce) -> None:
        ctx.state.applied.append(ctx.message_id)
        ctx.publish(Announced(topic_key=cmd.topic_key))

    for n in range(subscribers):
        endpoint = app.endpoint(f"sub{n:04d}{suffix}", state=Seen)

        @endpoint.handles(Announced)
        def seen(ctx: HandlerContext[Seen], event: Announced) -> None:
            ctx.state.applied.append(ctx.message_id)

    return app


async def applied_everywhere(harness: Harness, subscribers: list[str]) -> dict[str, list[str]]:
    return {name: await harness.applied(name) for name in subscribers}


async def publish_from_a_handler(backend: Backend, subscribers: int) -> None:
    suffix = unique_name("")[:6]
    app = fanout_app(suffix, subscribers)
    harness = await Harness.create(backend, app)
    hub, subs = f"hub{suffix}", [n for n in app.endpoints if n.startswith("sub")]

    receipt = await harness.setup_bus.client().send(
        Announce(topic_key="k1"), to=hub, idempotency_key="announce-1"
    )
    [incoming] = receipt.message_ids
    # The hub's signal twice: its copy finds the event published and publishes nothing more.
    [signal] = await harness.raw.queue(hub).peek()
    await harness.raw.queue(hub).send(signal.content)
    await harness.run_until_quiet()

    assert await harness.applied(hub) == [incoming]
    applied = await applied_everywhere(harness, subs)
    assert applied == {name: [derived_id(incoming, "out", 0, name)] for name in subs}
    assert await harness.tokens() == []


async def test_a_handler_publishes_to_150_subscribers_each_once(backend: Backend) -> None:
    await publish_from_a_handler(backend, 150)


async def test_a_handler_publishes_to_1000_subscribers_each_once_in_memory() -> None:
    await publish_from_a_handler(memory_backend(), 1000)


async def test_a_client_publishes_to_150_subscribers_once_per_key(backend: Backend) -> None:
    suffix = unique_name("")[:6]
    app = fanout_app(suffix, 150)
    harness = await Harness.create(backend, app)
    subs = [n for n in app.endpoints if n.startswith("sub")]
    client = harness.setup_bus.client()

    first = await client.publish(Announced(topic_key="k2"), idempotency_key="event-1")
    again = await client.publish(Announced(topic_key="k2"), idempotency_key="event-1")

    assert len(first.message_ids) == 150
    assert again.message_ids == first.message_ids  # read back from the spread record
    assert again.deduplicated
    depths = await harness.queue_depths()
    assert all(depths[name] >= 1 for name in subs)  # every signal sent, some twice (R6 again)
    if backend.name == "azurite":
        return  # processing 150 queues on Azurite is the handler test's; here the record
    await harness.run_until_quiet()
    applied = await applied_everywhere(harness, subs)
    assert sorted(m for ids in applied.values() for m in ids) == sorted(first.message_ids)
    assert all(len(ids) == 1 for ids in applied.values())


async def test_more_deliveries_than_the_setting_allows_are_refused_before_any_send() -> None:
    suffix = unique_name("")[:6]
    harness = await Harness.create(memory_backend(), fanout_app(suffix, 6), max_deliveries=5)

    with pytest.raises(MessageTooLarge, match=r"6 deliveries .* BUS_MAX_DELIVERIES=5"):
        await harness.setup_bus.client().publish(Announced(topic_key="k3"), idempotency_key="e")

    assert {q: n for q, n in (await harness.queue_depths()).items() if n} == {}
    assert await harness.tokens() == []


async def test_signals_past_what_one_entity_holds_are_refused_before_any_send() -> None:
    """1,000 deliveries with a partition key of 500 characters: an outbox record of about
    1.6 MB, which no table entity holds."""
    suffix = unique_name("")[:6]
    harness = await Harness.create(memory_backend(), fanout_app(suffix, 1000))

    with pytest.raises(MessageTooLarge, match="need an outbox record of about"):
        await harness.setup_bus.client().publish(
            Announced(topic_key="k" * 500), idempotency_key="wide"
        )

    assert await harness.tokens() == []


def memory_backend() -> Backend:
    clock = ManualClock()
    return Backend("memory", MemoryStorageAccount(clock=clock), clock)
