"""A publish to 1,000 subscribers, from a handler and from the ingress, under faults: every
subscriber processes the event exactly once, and one cleanup pass leaves no token and no
outbox record.

The faults come from the fault injector every pipeline test uses
(``shared.stores.instrumented``): every ``FAULT_EVERY``-th storage operation of each kind
(token creates, reads, claims and deletes, signal sends, queue deletes, table queries,
inserts and commits), of the functions and of the client, gets the next fault of ``FAULTS``
in turn: crashes before and after a request, timeouts before and after it was applied, and
requests that land late (after the whole run). The hub's signal is also delivered twice.
Tokens are created and signals sent through the bounded concurrent path with its default
limit (the in-memory stores answer without waiting, so few requests are ever in flight at
once; ``lab.bench.payload_fanout`` runs it with a latency)."""

from __future__ import annotations

from collections import Counter

from shared.bus.ids import derived_id
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.errors import OutcomeUnknown, StorageError
from shared.stores.instrumented import Fault, FaultPlan, Operation, SimulatedCrash
from tests.bus.harness import Harness
from tests.bus.test_fanout import Announce, Announced, fanout_app, memory_backend
from tests.conftest import unique_name

SUBSCRIBERS = 1000
FAULT_EVERY = 331
"""Every 331st operation of each kind (token create, signal send, table query...) gets a
fault: prime, so that faults fall on every kind of operation at different points, and about
three a round of the hub's 1,000 token creates."""
FAULTS = (
    Fault.CRASH_AFTER,
    Fault.CRASH_BEFORE,
    Fault.ERROR_BEFORE,
    Fault.LATE,
    Fault.ERROR_AFTER,
)
"""Each kind of operation gets these in turn, and then no more: the hub's first round
crashes, and its second meets two token creates whose outcome is unknown (one that lands
after the run) and commits, the kind of round whose rules the test is about. With no end to
them, a round of 1,000 deliveries (over 2,000 operations) would never complete, and its
message would rightly be parked."""


def spread_faults() -> FaultPlan:
    seen: Counter[str] = Counter()

    def plan(operation: Operation) -> Fault | None:
        seen[operation.kind] += 1
        nth, due = divmod(seen[operation.kind], FAULT_EVERY)
        return None if due or nth > len(FAULTS) else FAULTS[nth - 1]

    return plan


def faulted_kinds(harness: Harness) -> set[str]:
    return {operation.kind for operation, _ in harness.instrumentation.injected}


async def settle(harness: Harness) -> None:
    """Drain the queues, land the late requests, drain again, and run one cleanup pass
    once the grace period has passed."""
    await harness.run_until_quiet(max_passes=2000)
    harness.instrumentation.plan = lambda operation: None
    for held in harness.instrumentation.held:
        await held.land()
    await harness.run_until_quiet(max_passes=2000)
    clock = harness.backend.clock
    assert clock is not None
    settings = CleanupSettings(checkpoint_table=unique_name("cleanup"))
    clock.advance(settings.grace_seconds + 60)
    await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=settings,
    )


async def assert_each_once_and_nothing_left(
    harness: Harness, subscribers: list[str], expected: dict[str, list[str]]
) -> None:
    applied = {name: await harness.applied(name) for name in subscribers}
    assert applied == expected
    assert await harness.tokens_in_flight() == []
    for endpoint in harness.app.endpoints:
        assert await harness.outbox_records(endpoint) == []


async def test_a_handler_publishes_to_1000_subscribers_exactly_once_under_faults() -> None:
    suffix = unique_name("")[:6]
    app = fanout_app(suffix, SUBSCRIBERS)
    harness = await Harness.create(memory_backend(), app)
    hub, subs = f"hub{suffix}", [n for n in app.endpoints if n.startswith("sub")]
    receipt = await harness.setup_bus.client().send(
        Announce(topic_key="k1"), to=hub, idempotency_key="announce-1"
    )
    [incoming] = receipt.message_ids
    [signal] = await harness.raw.queue(hub).peek()
    await harness.raw.queue(hub).send(signal.content)
    harness.instrumentation.plan = spread_faults()

    await settle(harness)

    assert {"blob.create", "queue.send", "table.transact"} <= faulted_kinds(harness)
    assert harness.crashes > 0
    assert await harness.applied(hub) == [incoming]
    await assert_each_once_and_nothing_left(
        harness, subs, {name: [derived_id(incoming, "out", 0, name)] for name in subs}
    )


async def test_a_client_publishes_to_1000_subscribers_exactly_once_under_faults() -> None:
    """The client retries with its key until it has a receipt, as the ingress's callers do;
    a crash of the client is a retry too."""
    suffix = unique_name("")[:6]
    app = fanout_app(suffix, SUBSCRIBERS)
    harness = await Harness.create(memory_backend(), app)
    subs = [n for n in app.endpoints if n.startswith("sub")]
    client = harness.bus.client()  # on the instrumented account: its requests get faults too
    harness.instrumentation.plan = spread_faults()  # its rounds are short

    attempts = 0
    while True:
        attempts += 1
        try:
            receipt = await client.publish(Announced(topic_key="k2"), idempotency_key="event-1")
            break
        except (OutcomeUnknown, StorageError, SimulatedCrash):
            assert attempts < 50
    at_the_client = faulted_kinds(harness)
    harness.instrumentation.plan = spread_faults()

    await settle(harness)

    assert attempts > 1
    assert "blob.create" in at_the_client
    assert {"queue.send", "table.transact"} <= faulted_kinds(harness)
    assert len(receipt.message_ids) == SUBSCRIBERS
    applied = {name: await harness.applied(name) for name in subs}
    assert sorted(m for ids in applied.values() for m in ids) == sorted(receipt.message_ids)
    await assert_each_once_and_nothing_left(harness, subs, applied)
    assert all(len(ids) == 1 for ids in applied.values())
