"""An event with more subscribers than one table property lists signals for: published from a
handler and from a client, each subscriber processes it exactly once, and what no outbox
record or audit row could list is refused before anything is sent."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from shared.app_settings import MAX_DELIVERIES_CEILING
from shared.bus import BusApp, BusConfig, Command, Event, HandlerContext
from shared.bus.envelope import Envelope
from shared.bus.ids import derived_id, fresh_id
from shared.bus.outgoing import check_deliveries
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
    assert await harness.tokens_in_flight() == []


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
    assert await harness.tokens_in_flight() == []


def deliveries(
    outputs: int, per_output: int, *, key: str = "k", type_name: str = "Announced"
) -> tuple[str, list[Envelope]]:
    """Envelopes as ``plan_deliveries`` makes them: ``outputs`` events, each to
    ``per_output`` subscribers of the longest name an endpoint may have (40 characters)."""
    incoming = fresh_id()
    return incoming, [
        Envelope(
            id=derived_id(incoming, "out", index, destination),
            type=type_name,
            kind="event",
            source="hub",
            destination=destination,
            partition_key=f"{key}{index}",
            correlation_id=incoming,
            causation_id=incoming,
            created_at=datetime.now(UTC),
            body={},
        )
        for index in range(outputs)
        for destination in (f"sub{n:04d}".ljust(40, "x") for n in range(per_output))
    ]


def test_the_most_deliveries_the_setting_allows_fit_at_the_longest_names() -> None:
    incoming, planned = deliveries(1, MAX_DELIVERIES_CEILING)

    check_deliveries(planned, "hub", incoming, BusConfig())  # no MessageTooLarge


def test_outputs_whose_heads_outgrow_one_entity_are_refused() -> None:
    """1,000 events with a partition key of 500 characters each: the outbox record lists
    each output's key once, about 1 MB of them, which no table entity holds."""
    incoming, planned = deliveries(1000, 1, key="k" * 500)

    with pytest.raises(MessageTooLarge, match="need an outbox record of about"):
        check_deliveries(planned, "hub", incoming, BusConfig(max_outputs=1000))


def test_an_audit_row_that_would_outgrow_one_entity_is_refused() -> None:
    """3,000 deliveries of a type with a 150-character name: the audit row names the type
    for each delivery, about 1.6 MB."""
    incoming, planned = deliveries(1, 3000, type_name="T" * 150)

    with pytest.raises(MessageTooLarge, match="need an audit row of about"):
        check_deliveries(planned, "hub", incoming, BusConfig())


def memory_backend() -> Backend:
    clock = ManualClock()
    return Backend("memory", MemoryStorageAccount(clock=clock), clock)
