"""Delayed messages: never processed before their due time, exactly once after it, however
their signals arrive (early, twice, replayed, forged) and across a crash.

Every endpoint mode on the in-memory stores, token mode on Azurite (real seconds). A test
lets time pass in short steps until the message has been processed, failing if that happens
before its due time, so that it waits no longer than the delay itself."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from shared.bus import BusApp, Command, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.bus.envelope import Envelope, Signal, token_name
from shared.bus.ids import fresh_id
from shared.bus.outgoing import DUE_METADATA
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.clock import to_datetime
from shared.stores.instrumented import Fault, fault_at_first
from shared.stores.queue import MAX_VISIBILITY_TIMEOUT
from tests.bus.flow import Ledger
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.waiting import wait_until
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize("backend", backend_modes(azurite=["token"]), indirect=True)

DELAY = 2.0
"""Seconds: whole (the queue hides a message for whole seconds), long enough for a test to
look before it has passed even on a busy machine, short because on Azurite time really
passes."""


async def cleanup_pass(harness: Harness, cleanup: CleanupSettings) -> CleanupReport:
    """One cleanup run over every endpoint of the harness's app, at the harness's clock."""
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=cleanup,
    )


class Start(Command):
    partition_by = "key"
    key: str
    delay_seconds: float = DELAY


class Remind(Command):
    partition_by = "key"
    key: str


def reminder_app(name: str, mode: Mode) -> BusApp:
    """``Start`` applies itself and sends a delayed ``Remind`` to its own endpoint (a
    timeout); both append their message id to the partition's ledger."""
    app = BusApp()
    endpoint = app.endpoint(name, state=Ledger, mode=mode)

    @endpoint.handles(Start)
    def start(ctx: HandlerContext[Ledger], cmd: Start) -> None:
        ctx.state.applied.append("start")
        ctx.send(Remind(key=cmd.key), to=name, delay=timedelta(seconds=cmd.delay_seconds))

    @endpoint.handles(Remind)
    def remind(ctx: HandlerContext[Ledger], cmd: Remind) -> None:
        ctx.state.applied.append("remind")

    return app


async def started(backend: Backend, mode: Mode, delay: float = DELAY) -> tuple[Harness, str]:
    name = f"delays{unique_name('')[:8]}"
    harness = await Harness.create(backend, reminder_app(name, mode))
    await harness.setup_bus.client().send(
        Start(key="k", delay_seconds=delay), to=name, idempotency_key="start-k"
    )
    return harness, name


async def deliver_visible(harness: Harness, name: str) -> Counter[Outcome]:
    """Deliver every message visible now (and those a delivery makes visible now), without
    letting time pass; returns the outcomes of these deliveries."""
    before = Counter(harness.outcomes)
    while messages := await harness.raw.queue(name).receive(32, visibility_timeout=30):
        for message in messages:
            await harness.deliver(name, message)
    return harness.outcomes - before


async def ledger(harness: Harness, name: str) -> list[str]:
    return (await harness.state(name, "k")).applied


async def due_time(harness: Harness) -> float:
    """When the one delayed message in flight is due (bus clock), as its token says. (In
    token mode the token of the message that sent it is still there too, claimed, waiting
    for the cleanup's R7: not in flight.)"""
    [token] = await harness.tokens_in_flight()
    blob = await harness.raw.blob_container(harness.config.tokens_container).read(token)
    deliver_at = Envelope.from_bytes(blob.data).deliver_at
    assert deliver_at is not None, token
    return deliver_at.timestamp()


async def deliver_when_due(harness: Harness, name: str) -> Counter[Outcome]:
    """Deliver what becomes visible as time passes, until the delayed ``Remind`` has been
    processed and no signal is left in the queue, hidden or not; returns the outcomes of
    these deliveries. Fails if ``Remind`` was processed before its due time."""
    due = await due_time(harness)
    outcomes: Counter[Outcome] = Counter()

    async def settled() -> bool:
        outcomes.update(await deliver_visible(harness, name))
        processed = "remind" in await ledger(harness, name)
        if processed and harness.config.clock() < due:
            pytest.fail("the delayed message was processed before its due time")
        return processed and await harness.raw.queue(name).approximate_count() == 0

    await wait_until(harness, settled, within=DELAY + 10)
    return outcomes


async def test_a_delayed_message_waits_for_its_time_then_is_processed_once(
    backend: Backend, mode: Mode
) -> None:
    # Given a handler that sent a delayed message to its own endpoint
    harness, name = await started(backend, mode)
    await deliver_visible(harness, name)
    assert await ledger(harness, name) == ["start"]

    # When the queue is drained before the delay has passed
    early = await deliver_visible(harness, name)

    # Then nothing was delivered: the signal is hidden, the token waits
    assert early == Counter()
    assert await ledger(harness, name) == ["start"]
    assert len(await harness.tokens_in_flight()) == 1

    # And once the delay has passed it is processed, once
    assert await deliver_when_due(harness, name) == Counter({Outcome.PROCESSED: 1})
    assert await ledger(harness, name) == ["start", "remind"]
    assert await harness.tokens_in_flight() == []


async def test_the_delayed_signal_is_sent_hidden_by_the_bus_clock(
    backend: Backend, mode: Mode
) -> None:
    """Every mode hides the signal it sends for a delayed output, on the bus's clock: a
    signal sent visible would only be caught (and hidden again) by the receiver's check."""
    harness, name = await started(backend, mode)
    [start] = await harness.raw.queue(name).receive(32, visibility_timeout=30)
    await harness.deliver(name, start)

    assert await ledger(harness, name) == ["start"]
    assert await harness.raw.queue(name).peek(32) == []
    assert len(await harness.tokens_in_flight()) == 1


async def committed_signal(harness: Harness, name: str) -> Signal:
    """The signal of the one output the endpoint committed, as a replay or anyone with send
    rights on the queue could write it."""
    [token] = await harness.tokens_in_flight()
    data = (await harness.raw.blob_container(harness.config.tokens_container).read(token)).data
    envelope = Envelope.from_bytes(data)
    return Signal(
        message_id=envelope.id,
        attempt_id=token.split("/")[2],
        token=token,
        partition_key=envelope.partition_key,
    )


async def test_an_early_signal_hides_itself_again_and_the_message_is_processed_once(
    backend: Backend, mode: Mode
) -> None:
    # Given a delayed message in flight, and a copy of its signal sent visible at once
    # (a replayed or forged signal)
    harness, name = await started(backend, mode)
    await deliver_visible(harness, name)
    signal = await committed_signal(harness, name)
    await harness.raw.queue(name).send(signal.to_json())

    # When it is delivered before the due time
    outcomes = await deliver_visible(harness, name)

    # Then it is deferred: not processed, token kept, its signal hidden again
    assert outcomes == Counter({Outcome.DEFERRED: 1})
    assert await ledger(harness, name) == ["start"]
    assert len(await harness.tokens_in_flight()) == 1
    assert await harness.raw.queue(name).peek() == []
    assert await harness.raw.queue(name).approximate_count() == 2  # the original and the copy

    # And after the due time the two signals process it once. The second one finds it done:
    # a duplicate, or in token mode a resumption (its token stays, claimed, until the
    # cleanup's R7), which applies nothing and has no signal of its own to send.
    outcomes = await deliver_when_due(harness, name)
    second = Outcome.RESUMED if mode == "token" else Outcome.DUPLICATE
    assert outcomes[Outcome.PROCESSED] == 1
    assert outcomes[Outcome.PROCESSED] + outcomes[second] == 2
    assert await ledger(harness, name) == ["start", "remind"]


async def test_a_signal_whose_envelope_copy_drops_the_due_time_is_not_believed(
    backend: Backend, mode: Mode
) -> None:
    # Given a signal carrying hints: the token's ETag and an envelope copy with the due time
    # removed (the name's digest no longer matches it)
    harness, name = await started(backend, mode)
    await deliver_visible(harness, name)
    signal = await committed_signal(harness, name)
    blob = await harness.raw.blob_container(harness.config.tokens_container).read(signal.token)
    forged = Envelope.from_bytes(blob.data).model_copy(update={"deliver_at": None})
    hinted = signal.model_copy(update={"etag": blob.etag, "envelope": forged.model_dump_json()})
    await harness.raw.queue(name).send(hinted.to_json())

    # When it is delivered before the due time
    outcomes = await deliver_visible(harness, name)

    # Then the token was read and decides: not due, deferred
    assert outcomes == Counter({Outcome.DEFERRED: 1})
    assert await ledger(harness, name) == ["start"]


@pytest.mark.parametrize("fault", [Fault.CRASH_AFTER, Fault.CRASH_BEFORE])
async def test_a_crash_around_hiding_an_early_signal_neither_loses_nor_duplicates(
    backend: Backend, mode: Mode, fault: Fault
) -> None:
    # Given an early copy of a delayed message's signal
    harness, name = await started(backend, mode)
    await deliver_visible(harness, name)
    await harness.raw.queue(name).send((await committed_signal(harness, name)).to_json())

    # When the receiver crashes just before or just after sending it again hidden
    harness.instrumentation.plan = fault_at_first("queue.send", fault)
    await deliver_visible(harness, name)
    harness.instrumentation.plan = lambda op: None
    assert harness.crashes == 1

    # Then it is not processed early, and after its time exactly once
    assert await ledger(harness, name) == ["start"]
    await deliver_when_due(harness, name)
    assert await ledger(harness, name) == ["start", "remind"]
    assert await harness.tokens_in_flight() == []


async def test_a_delay_longer_than_the_queue_allows_reschedules_itself(
    backend: Backend, mode: Mode
) -> None:
    if backend.clock is None:
        pytest.skip("ten days on a manual clock only")
    ten_days = 10 * 24 * 3600.0
    harness, name = await started(backend, mode, delay=ten_days)
    await deliver_visible(harness, name)
    cleanup = CleanupSettings(grace_seconds=300, checkpoint_table=unique_name("cleanup"))

    # After the queue's 7-day cap the signal shows up early: it hides itself for the rest
    await backend.elapse(MAX_VISIBILITY_TIMEOUT + 1)
    assert await deliver_visible(harness, name) == Counter({Outcome.DEFERRED: 1})

    # The cleanup, meanwhile, keeps the token: it is in flight, not abandoned
    [delayed] = await harness.tokens_in_flight()
    report = await cleanup_pass(harness, cleanup)
    assert report.removed().get("abandoned_tokens", 0) == 0
    assert await harness.tokens_in_flight() == [delayed]
    # In token mode Start's own token stays as well, claimed: its R7 waits until the output
    # it sent has been received.
    assert report.removed().get("incoming_tokens", 0) == 0
    assert len(await harness.tokens()) == (2 if mode == "token" else 1)

    # Not a second early
    await backend.elapse(ten_days - MAX_VISIBILITY_TIMEOUT - 3)
    assert await deliver_visible(harness, name) == Counter()
    assert await ledger(harness, name) == ["start"]

    # And on time, once
    await backend.elapse(4)
    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 1})
    assert await ledger(harness, name) == ["start", "remind"]

    # After which, past its grace period, the cleanup deletes the two processed tokens (token
    # mode's R7) with their outbox records: no token is left
    await backend.elapse(cleanup.grace_seconds + 1)
    report = await cleanup_pass(harness, cleanup)
    assert report.removed().get("incoming_tokens", 0) == (2 if mode == "token" else 0)
    assert await harness.tokens() == []


async def test_a_client_send_with_a_delay_is_held_until_then_and_deduplicated(
    backend: Backend, mode: Mode
) -> None:
    # Given a client send of Remind with a delay, retried with the same key
    name = f"delays{unique_name('')[:8]}"
    harness = await Harness.create(backend, reminder_app(name, mode))
    client = harness.setup_bus.client()
    first = await client.send(
        Remind(key="k"), to=name, idempotency_key="r", delay=timedelta(seconds=DELAY)
    )
    again = await client.send(
        Remind(key="k"), to=name, idempotency_key="r", delay=timedelta(seconds=DELAY)
    )
    assert again.deduplicated
    assert again.message_ids == first.message_ids

    # Then nothing is processed before the delay, and once after it
    assert await deliver_visible(harness, name) == Counter()
    await deliver_when_due(harness, name)
    assert await ledger(harness, name) == ["remind"]


async def test_a_signal_replayed_from_the_outbox_record_is_still_hidden(
    backend: Backend, mode: Mode
) -> None:
    if mode != "token":
        pytest.skip("O(m) is token mode's record")
    # Given the first delivery crashed after its commit, before R6 signalled the output
    harness, name = await started(backend, mode)
    harness.instrumentation.plan = fault_at_first("queue.send", Fault.CRASH_BEFORE)

    # When the redelivery resumes from O(m) and signals it
    outcomes = await deliver_visible(harness, name)
    harness.instrumentation.plan = lambda op: None
    assert harness.crashes == 1
    assert outcomes == Counter({Outcome.RESUMED: 1})
    [record] = await harness.outbox_records(name)
    assert record.outgoing[0].deliver_at is not None

    # Then that signal is hidden until the due time too
    assert await harness.raw.queue(name).peek() == []
    assert await deliver_when_due(harness, name) == Counter({Outcome.PROCESSED: 1})
    assert await ledger(harness, name) == ["start", "remind"]


async def test_the_cleanup_counts_a_delayed_token_s_age_from_its_due_time(
    backend: Backend, mode: Mode
) -> None:
    if backend.clock is None or mode != "token":
        pytest.skip("days pass on a manual clock only; the token is the same in every mode")
    # Given two tokens without an origin row to judge them by (written by an older sender),
    # one of them for a message due in 10 days
    harness, _ = await started(backend, mode)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    due = to_datetime(backend.clock() + 10 * 24 * 3600)
    plain = token_name("oldsender", fresh_id(), fresh_id(), fresh_id(), b"{}")
    delayed = token_name("oldsender", fresh_id(), fresh_id(), fresh_id(), b"{ }")
    await tokens.create(plain, b"{}", {"claim": ""})
    await tokens.create(delayed, b"{ }", {"claim": "", DUE_METADATA: due.isoformat()})

    # When the cleanup runs after the ingress window (past which such a token is abandoned)
    await backend.elapse(harness.config.ingress_window_seconds + 1)
    cleanup = CleanupSettings(grace_seconds=300, checkpoint_table=unique_name("cleanup"))
    await cleanup_pass(harness, cleanup)

    # Then only the undelayed one is removed: the delayed one's age counts from its due time
    names = await harness.tokens()
    assert delayed in names
    assert plain not in names
