"""Cancelling a scheduled message (issue 46): a cancelled message is never processed, one
already processed is not undone, and a cancel racing a delivery ends with exactly one of the
two, on every store (in memory, Azurite, PostgreSQL in its model and a real server) and
across a stop at each step of the cancel."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext, Outcome
from shared.bus.app import Store
from shared.bus.cancel import CancelResult
from shared.bus.client_cancel import CancelReceipt, cancel_by_key
from shared.bus.handles import MessageHandle
from shared.bus.records import OutboxRecord
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.stores.instrumented import (
    Fault,
    FaultPlan,
    Operation,
    SimulatedCrash,
    fault_at_first,
)
from tests.bus.harness import (
    Harness,
    backend_modes,
    document_write,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.waiting import wait_until
from tests.conftest import Backend, unique_name

TOKEN_BACKENDS = [p for p in backend_modes(azurite=["token"]) if p.values[0][1] == "token"]
"""Token mode, the mode a message can be cancelled at, on every store."""
pytestmark = pytest.mark.parametrize("backend", TOKEN_BACKENDS, indirect=True)

DELAY = 2.0
"""Seconds: whole (the queue hides a message for whole seconds) and short, since on Azurite
time really passes."""


class Start(Command):
    partition_by = "key"
    key: str
    delay_seconds: float = DELAY


class Remind(Command):
    partition_by = "key"
    key: str


class Stop(Command):
    partition_by = "key"
    key: str


class Timers(BaseModel):
    applied: list[str] = []
    reminder: MessageHandle | None = None


def timers_app(name: str) -> BusApp:
    """``Start`` sets a delayed ``Remind`` to its own endpoint and keeps its handle;
    ``Stop`` cancels it. Each appends its name to the partition's state."""
    app = BusApp()
    endpoint = app.endpoint(name, state=Timers)

    @endpoint.handles(Start)
    def start(ctx: HandlerContext[Timers], cmd: Start) -> None:
        ctx.state.applied.append("start")
        delay = timedelta(seconds=cmd.delay_seconds)
        ctx.state.reminder = ctx.send(Remind(key=cmd.key), to=name, delay=delay)

    @endpoint.handles(Remind)
    def remind(ctx: HandlerContext[Timers], cmd: Remind) -> None:
        ctx.state.applied.append("remind")

    @endpoint.handles(Stop)
    def stop(ctx: HandlerContext[Timers], cmd: Stop) -> None:
        ctx.state.applied.append("stop")
        if ctx.state.reminder is not None:
            ctx.cancel(ctx.state.reminder)

    return app


async def timers(backend: Backend) -> tuple[Harness, str]:
    name = f"timers{unique_name('')[:8]}"
    return await Harness.create(backend, timers_app(name)), name


async def deliver_visible(harness: Harness, name: str) -> Counter[Outcome]:
    """Deliver every message visible now, and those the deliveries make visible."""
    before = Counter(harness.outcomes)
    while messages := await harness.raw.queue(name).receive(32, visibility_timeout=30):
        for message in messages:
            await harness.deliver(name, message)
    return harness.outcomes - before


async def state(harness: Harness, name: str, key: str = "k") -> Timers:
    return await harness.applied_state(name, key, Timers)


async def record_of(harness: Harness, name: str, message_id: str) -> OutboxRecord | None:
    return next((r for r in await harness.outbox_records(name) if r.message_id == message_id), None)


async def audit_outcome(harness: Harness, name: str, message_id: str) -> object:
    """The audit row's ``outcome`` of ``message_id`` (None: processed as usual), or
    ``"no row"``."""
    async for row in harness.rows(name).audit_entities():
        if row["message_id"] == message_id:
            return row.get("outcome")
    return "no row"


async def cleanup_pass(harness: Harness) -> None:
    settings = CleanupSettings(grace_seconds=0, checkpoint_table=unique_name("cleanup"))
    await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=settings,
    )


async def test_a_timeout_cancelled_before_it_is_due_is_never_processed(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a handler that set a delayed Remind and kept its handle
    caplog.set_level(logging.INFO, logger="shared.bus.cancel")
    harness, name = await timers(backend)
    client = harness.setup_bus.client()
    await client.send(Start(key="k"), to=name, idempotency_key="start")
    await deliver_visible(harness, name)
    reminder = (await state(harness, name)).reminder
    assert reminder is not None
    assert (reminder.destination, reminder.partition_key, reminder.sender) == (name, "k", name)

    # When another message's handler cancels it before it is due
    await client.send(Stop(key="k"), to=name, idempotency_key="stop")
    outcomes = await deliver_visible(harness, name)

    # Then the cancel was carried out at once, its own message committed, with one log line
    assert outcomes == Counter({Outcome.PROCESSED: 1, Outcome.CANCEL: 1})
    cancels = [r.getMessage() for r in caplog.records if r.name == "shared.bus.cancel"]
    assert cancels == [
        f"cancel endpoint={name} message_id={reminder.message_id} partition=k outcome=cancelled"
    ]
    record = await record_of(harness, name, reminder.message_id)
    assert record is not None
    assert (record.committed, record.outcome, record.outgoing) == (True, "cancelled", ())
    assert await audit_outcome(harness, name, reminder.message_id) == "cancelled"

    # And the cleanup deletes its token and retires its record as any processed message's,
    # releasing the sender's own incoming token too: no token is left
    await cleanup_pass(harness)
    await cleanup_pass(harness)
    assert await harness.tokens() == []
    assert await record_of(harness, name, reminder.message_id) is None

    # And when its signal comes at its due time, it is not processed
    async def drained() -> bool:
        await deliver_visible(harness, name)
        return await harness.raw.queue(name).approximate_count() == 0

    await wait_until(harness, drained, within=DELAY + 10)
    assert (await state(harness, name)).applied == ["start", "stop"]
    assert await audit_outcome(harness, name, reminder.message_id) == "cancelled"


async def test_a_cancel_of_a_message_processed_already_answers_processed(
    backend: Backend,
) -> None:
    # Given a message sent by a client and processed
    harness, name = await timers(backend)
    receipt = await harness.setup_bus.client().send(Remind(key="k"), to=name, idempotency_key="r")
    await deliver_visible(harness, name)
    rows_before = await harness.row_keys(name)

    # When the client cancels it, twice
    answers = [await cancel_by_key(harness.bus, "r", sender="ingress") for _ in range(2)]

    # Then it answers processed and changes nothing
    assert [a.as_json() if a else None for a in answers] == [
        {"idempotency_key": "r", "outcome": "processed", "messages": {mid: "processed"}}
        for mid in receipt.message_ids
    ] * 2
    assert (await state(harness, name)).applied == ["remind"]
    assert await harness.row_keys(name) == rows_before

    # And once the cleanup removed its token and record, the audit row still tells
    await cleanup_pass(harness)
    assert await harness.tokens() == []
    answer = await cancel_by_key(harness.bus, "r", sender="ingress")
    assert answer is not None
    assert answer.outcome == "processed"


async def test_a_client_cancel_before_delivery_is_cancelled_and_answers_so_again(
    backend: Backend,
) -> None:
    harness, name = await timers(backend)
    await harness.setup_bus.client().send(
        Remind(key="k"), to=name, idempotency_key="r", delay=timedelta(hours=1)
    )
    first = await cancel_by_key(harness.bus, "r", sender="ingress")
    again = await cancel_by_key(harness.bus, "r", sender="ingress")
    assert first is not None
    assert again is not None
    assert first.outcome == again.outcome == "cancelled"
    await cleanup_pass(harness)
    assert await harness.tokens() == []
    third = await cancel_by_key(harness.bus, "r", sender="ingress")
    assert third is not None
    assert third.outcome == "cancelled"  # the audit row says so once the token is gone


async def test_a_cancel_of_an_unknown_key_finds_nothing(backend: Backend) -> None:
    harness, _ = await timers(backend)
    assert await cancel_by_key(harness.bus, "never-sent", sender="ingress") is None


RACES = {"memory": 40, "memory-sql": 40, "memory-cosmos": 40, "memory-blob": 40}
"""Races per test on the in-memory stores; the real stores run fewer, each being slower."""


def interleaving(seed: int) -> Callable[[Operation], Awaitable[None]]:
    """Before each storage request, give way to the other party a random number of times
    (seeded: a failing run is repeatable), so that the two interleave differently each race."""
    rng = random.Random(seed)

    async def give_way(_: Operation) -> None:
        for _turn in range(rng.randint(0, 3)):
            await asyncio.sleep(0)

    return give_way


async def test_a_cancel_racing_a_delivery_ends_with_exactly_one_of_the_two(
    backend: Backend,
) -> None:
    harness, name = await timers(backend)
    client = harness.setup_bus.client()
    races = RACES.get(backend.name, 8)
    answers: Counter[str] = Counter()
    for race in range(races):
        # Given a message due now, its signal taken from the queue
        key = f"race-{race}"
        receipt = await client.send(Remind(key=key), to=name, idempotency_key=key)
        [message_id] = receipt.message_ids
        [signal] = await harness.raw.queue(name).receive(1, visibility_timeout=30)

        # When a cancel and its delivery run at once
        harness.instrumentation.on_operation = interleaving(race)
        cancelled, _ = await asyncio.gather(
            cancel_by_key(harness.bus, key, sender="ingress"), harness.deliver(name, signal)
        )
        harness.instrumentation.on_operation = None

        # Then exactly one happened, and the cancel's answer says which
        assert isinstance(cancelled, CancelReceipt)
        answer = cancelled.results[message_id]
        processed = (await state(harness, name, key)).applied
        assert answer in (CancelResult.CANCELLED, CancelResult.PROCESSED)
        assert processed == (["remind"] if answer is CancelResult.PROCESSED else [])
        audit = await audit_outcome(harness, name, message_id)
        assert audit == ("cancelled" if answer is CancelResult.CANCELLED else None)
        answers[answer.value] += 1

    # And whatever is delivered later changes nothing
    await harness.run_until_quiet()
    for race in range(races):
        applied = (await state(harness, name, f"race-{race}")).applied
        assert applied in ([], ["remind"])
    assert sum(answers.values()) == races
    if backend.clock is not None:  # seeded interleavings: both ends occur among them
        assert set(answers) == {"cancelled", "processed"}


async def test_a_handler_s_cancel_racing_the_delivery_ends_with_exactly_one(
    backend: Backend,
) -> None:
    """As above, with the cancel a handler's: its command's own delivery races the message's."""
    harness, name = await timers(backend)
    client = harness.setup_bus.client()
    races = RACES.get(backend.name, 4)
    answers: Counter[bool] = Counter()
    for race in range(races):
        # Given a Remind due at once, and the cancel of it that Stop sent, both in the queue
        key = f"race-{race}"
        await client.send(Start(key=key, delay_seconds=0), to=name, idempotency_key=f"s{key}")
        [start] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
        await harness.deliver(name, start)
        [remind] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
        await client.send(Stop(key=key), to=name, idempotency_key=f"t{key}")
        [stop] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
        await harness.deliver(name, stop)
        [cancel] = await harness.raw.queue(name).receive(1, visibility_timeout=30)

        # When the cancel command and the Remind are delivered at once
        harness.instrumentation.on_operation = interleaving(race)
        await asyncio.gather(harness.deliver(name, cancel), harness.deliver(name, remind))
        harness.instrumentation.on_operation = None

        # Then the Remind was processed or cancelled, and the audit row says which
        reminder = (await state(harness, name, key)).reminder
        assert reminder is not None
        processed = "remind" in (await state(harness, name, key)).applied
        audit = await audit_outcome(harness, name, reminder.message_id)
        assert audit == (None if processed else "cancelled")
        answers[processed] += 1

    await harness.run_until_quiet()
    for race in range(races):
        assert (await state(harness, name, f"race-{race}")).applied.count("remind") <= 1
    if backend.clock is not None:
        assert set(answers) == {True, False}


def first_step(store: Store, kind: str) -> FaultPlan:
    """A crash right after the first ``kind`` request: O(t)'s insert in the endpoint's
    store (on a document store, the first write of a partition document), or the claim."""
    if kind != "insert":
        return fault_at_first(kind, Fault.CRASH_AFTER)
    if store in ("table", "postgres"):
        return fault_at_first(
            "sql.insert" if store == "postgres" else "table.insert", Fault.CRASH_AFTER
        )
    crashed: list[Operation] = []

    def plan(operation: Operation) -> Fault | None:
        if crashed or not document_write(operation, store):
            return None
        crashed.append(operation)
        return Fault.CRASH_AFTER

    return plan


@pytest.mark.parametrize(
    ("kind", "then_cancel_first"),
    [
        ("insert", False),
        ("insert", True),
        ("blob.set_metadata", False),
        ("blob.set_metadata", True),
    ],
)
async def test_a_cancel_stopped_after_a_step_still_ends_with_exactly_one(
    backend: Backend, kind: str, then_cancel_first: bool
) -> None:
    # Given a client's message due now
    harness, name = await timers(backend)
    receipt = await harness.setup_bus.client().send(Remind(key="k"), to=name, idempotency_key="r")
    [message_id] = receipt.message_ids

    # When a cancel stops right after inserting O(t) (C3) or after claiming the token (C4)
    harness.instrumentation.plan = first_step(harness.app.get(name).store, kind)
    with pytest.raises(SimulatedCrash):
        await cancel_by_key(harness.bus, "r", sender="ingress")
    harness.instrumentation.plan = lambda op: None

    # Then whichever comes next, the cancel again or the delivery, decides, once
    if then_cancel_first:
        answer = await cancel_by_key(harness.bus, "r", sender="ingress")
        await harness.run_until_quiet()
        expected = CancelResult.CANCELLED
    else:
        await harness.run_until_quiet()
        answer = await cancel_by_key(harness.bus, "r", sender="ingress")
        expected = CancelResult.PROCESSED
    assert answer is not None
    assert answer.results[message_id] is expected
    applied = (await state(harness, name)).applied
    assert applied == (["remind"] if expected is CancelResult.PROCESSED else [])
