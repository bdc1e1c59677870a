"""The cancel phase (issue 46): cancellable scheduled messages racing their delivery.

The app (``build_cancel_app``): ``first`` is a saga with state ``Reminders``, started by
Start; ``second`` an ordinary token-mode endpoint. Before the run the client sends m0, a
Start for instance ``k0``, and m1, a Remind to ``second`` due ``DELAY`` later (queued
``SimConfig.copies`` times each). Then, each step the cause of the next:

1. Start (m0) creates ``k0``, requests a timeout (Deadline, due ``DELAY`` later, kept among
   the instance's pending timeouts), sends a Remind to ``second`` due as late, keeping its
   handle in its state, and sends Charge to ``second``;
2. ``second`` replies CardCharged;
3. CardCharged cancels the Remind by its handle (``ctx.cancel``: a ``bus.CancelScheduled`` to
   ``second``), completes the instance (which cancels the Deadline, another
   ``CancelScheduled``, to the saga itself) and sends Closed, carrying the instance's journal.

Beside them the client cancels m1 by its key (``cancel_by_key``) once, when the schedule
chooses (and once more should its first call end without an answer). Time passes in ticks
of more than ``DELAY``, so any of the three may become due before its cancel runs. The
handlers of Deadline and Remind change nothing and send nothing: whether each ran or was
cancelled, the journals are the fault-free run's, so the usual invariants judge the rest;
CancelOrProcessedOnce (``lab.sim.invariants.check_cancels``) judges these three by their
audit rows, the client's answers and what the world saw processed, and the saga's pending
timeouts against them.

A known-bad variant wraps the stores, replaces the saga endpoint's receiver
(``lab.sim.sagas.SagaVariantBus``) or the client's canceller (``World.canceller_class``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from lab.sim import invocation
from lab.sim.invariants import (
    PROCESSED,
    CancelEnd,
    Observation,
    Violation,
    check,
    check_cancels,
    check_sagas,
)
from lab.sim.model import ENDPOINTS, Journal, SimApp, Start, Version, record
from lab.sim.sagas import CardCharged, Charge, Closed, Ledger, SagaWorld
from lab.sim.world import CLIENT, Action
from shared.bus import BusApp, Command, HandlerContext
from shared.bus.cancel import Canceller, Target
from shared.bus.client_cancel import cancel_by_key
from shared.bus.handles import CANCEL_TYPE, MessageHandle
from shared.bus.ingress import IngressClient, recorded_signals
from shared.bus.pipeline import Outcome
from shared.bus.records import AUDIT_PREFIX, STATE_ROW
from shared.bus.saga import SagaRow
from shared.stores.account import StorageAccount

DELAY = 30.0
"""Seconds until a scheduled message is due: less than one tick, so one tick makes it due."""
CANCELLED_KEY = "m1"
"""The client's message the client cancels by its key."""
CANCELLABLE = frozenset({"Deadline", "Remind"})
"""The types of the messages a cancel races (their audit rows' ``message_type``)."""


class Deadline(Command):
    """The saga's timeout: cancelled by the completion, or found the instance completed."""

    partition_by = "key"
    key: str


class Remind(Command):
    """A scheduled message to ``second``: the saga's (cancelled by its handle) or the
    client's m1 (cancelled by its key)."""

    partition_by = "key"
    key: str
    request: str


class Reminders(Journal):
    """The saga's state: its journal and the handle of the Remind it sent."""

    reminder: MessageHandle | None = None


def _ran(ctx: HandlerContext[Journal]) -> None:
    """The handler of a cancellable message ran in this invocation (the world keeps the ids
    of those whose invocation then processed them)."""
    current = invocation.current.get()
    if current is not None:
        current.ran.append(ctx.message_id)


def build_cancel_app(suffix: str = "") -> SimApp:
    app = BusApp()
    saga = app.saga(f"{ENDPOINTS[0]}{suffix}", Reminders, started_by=[Start])
    second = app.endpoint(f"{ENDPOINTS[1]}{suffix}", Ledger)
    later = timedelta(seconds=DELAY)

    @saga.handles(Start)
    def start(ctx: HandlerContext[Journal], message: Start) -> None:
        record(ctx, message.request)
        ctx.request_timeout(Deadline(key=message.key), delay=later)
        remind = Remind(key=message.key, request=f"{message.request}>remind")
        handle = ctx.send(remind, to=second.name, delay=later)
        if isinstance(ctx.state, Reminders):  # the saga's state is Reminders
            ctx.state.reminder = handle
        ctx.send(Charge(key=message.key, path=f"{message.request}>charge"), to=second.name)

    @saga.handles(CardCharged)
    def charged(ctx: HandlerContext[Journal], message: CardCharged) -> None:
        record(ctx, message.path)
        if isinstance(ctx.state, Reminders) and ctx.state.reminder is not None:
            ctx.cancel(ctx.state.reminder)
        ctx.complete()
        journal = list(ctx.state.applied)
        started = journal[0].name if journal else ""
        path = f"{message.path}>closed"
        ctx.send(
            Closed(key=ctx.partition_key, path=path, started=started, instance=journal),
            to=second.name,
        )

    @saga.handles(Deadline)
    def deadline(ctx: HandlerContext[Journal], message: Deadline) -> None:
        _ran(ctx)

    @second.handles(Remind)
    def remind(ctx: HandlerContext[Journal], message: Remind) -> None:
        _ran(ctx)

    @second.handles(Charge)
    def charge(ctx: HandlerContext[Journal], message: Charge) -> None:
        record(ctx, message.path)
        ctx.reply(CardCharged(card=f"card-{message.key}", path=f"{message.path}>charged"))

    @second.handles(Closed)
    def closed(ctx: HandlerContext[Journal], message: Closed) -> None:
        record(ctx, message.path)
        if isinstance(ctx.state, Ledger):  # second's state is a Ledger
            ctx.state.closed.extend(message.instance)

    app.check()
    return SimApp(app, "single", saga.name)


CANCEL = Action("cancel", 1.0, queue=CANCELLED_KEY)


@dataclass
class CancelWorld(SagaWorld):
    """A ``SagaWorld`` whose app is the cancel phase's (``build_cancel_app``), whose client
    also cancels m1 by its key."""

    cancels_left: int = 1
    cancel_retries: int = 1
    answers: list[str] = field(default_factory=list)
    """What each of the client's cancels answered (``CancelReceipt.outcome``)."""
    processed: list[str] = field(default_factory=list)
    """Ids of the cancellable messages an invocation processed (ran and committed)."""
    audit_expired: bool = False
    """Stalled processes woke after the audit retention: audit rows may be gone."""

    def _build_app(self, instrumented: StorageAccount) -> SimApp:
        return build_cancel_app(self.suffix)

    async def _send_initial(self, client: IngressClient, number: int) -> None:
        """m1 is due ``DELAY`` after it is sent: hidden until then, as its copies are."""
        if number == 0:
            await super()._send_initial(client, number)
            return
        remind = Remind(key=f"k{number}", request=f"m{number}")
        later = timedelta(seconds=DELAY)
        await client.send(remind, to=self.endpoints[1], idempotency_key=f"m{number}", delay=later)

    async def enabled(self) -> list[Action]:
        actions = await super().enabled()
        if not self._cancel_allowed():
            return actions
        # After the current process's next step (the default), else first: the fault-free
        # run cancels m1 before anything else runs.
        current = self._current
        at = 1 if actions and current is not None and actions[0].process is current else 0
        return [*actions[:at], CANCEL, *actions[at:]]

    def _cancel_allowed(self) -> bool:
        cancelling = any(p.name.startswith("cancel") for p in self.scheduler.live())
        if cancelling:
            return False
        return self.cancels_left > 0 or (not self.answers and self.cancel_retries > 0)

    async def perform(self, action: Action) -> None:
        if action.kind != "cancel":
            await super().perform(action)
            return
        number = len(self.trace)
        self._queues = {}
        if self.cancels_left > 0:
            self.cancels_left -= 1
        else:
            self.cancel_retries -= 1
        self._current = await self.scheduler.spawn(
            f"cancel{len(self.scheduler.processes)}@{CANCELLED_KEY}",
            self._client_cancel,
            self.now(),
        )
        self._spawned(number, self._current)

    async def _client_cancel(self) -> str:
        if self.canceller_class is None:
            receipt = await cancel_by_key(self.bus, CANCELLED_KEY, sender=CLIENT)
            answer = "none" if receipt is None else receipt.outcome
        else:
            answer = await self._variant_cancel(self.canceller_class)
        self.answers.append(answer)
        return f"answered {answer}"

    async def _variant_cancel(self, canceller: type[Canceller]) -> str:
        """``cancel_by_key`` with a known-bad variant's canceller."""
        record = await self.bus.client(CLIENT).recorded(CANCELLED_KEY)
        if record is None:
            return "none"
        [signal] = recorded_signals(record)
        receiver = self.bus.receiver(signal.destination)
        found = canceller(
            receiver.endpoint.name, receiver.tokens, receiver.state_store, receiver.config
        )
        target = Target(signal.partition_key, signal.message_id, str(record.get("sender", "")))
        return (await found.cancel(signal.token, target)).value

    async def _invocation(self, queue_name: str, version: Version = "new") -> str:
        result = await super()._invocation(queue_name, version)
        current = invocation.current.get()
        if current is not None and current.outcome is Outcome.PROCESSED:
            # Once per invocation: a round that lost its commit runs the handler again.
            self.processed += dict.fromkeys(current.ran)
        return result

    async def _resume(self) -> None:
        await super()._resume()
        self.audit_expired = self.audit_expired or self.config.stall_outlasts_audit

    async def _observe(self) -> Observation:
        seen = await super()._observe()
        rows = self._endpoint_rows(self.account)
        cancellable: dict[str, CancelEnd] = {}
        cancels: set[str] = set()
        for endpoint in self.endpoints:
            async for entity in rows[endpoint].every():
                if not entity.row_key.startswith(AUDIT_PREFIX):
                    continue
                kind, message_id = str(entity["message_type"]), str(entity["message_id"])
                if kind == CANCEL_TYPE:
                    cancels.add(message_id)
                elif kind in CANCELLABLE:
                    source = str(entity["source"])
                    end = cancellable.setdefault(message_id, CancelEnd(endpoint, source))
                    end.outcomes.append(str(entity.get("outcome", "processed")))
        saga = self.endpoints[0]
        async for entity in rows[saga].every(row_key=STATE_ROW):
            row = SagaRow.decode(str(entity["data"]), f"{saga} {entity.partition_key}")
            seen.pending[entity.partition_key] = [t.message_id for t in row.timeouts]
        seen.cancellable = cancellable
        seen.cancel_commands = cancels
        seen.answers = list(self.answers)
        seen.seen_processed = list(self.processed)
        seen.audit_kept = not self.audit_expired
        # Their audit rows name messages no journal applies: CancelOrProcessedOnce judges them.
        judged = cancellable.keys() | cancels
        for endpoint, caused in seen.caused.items():
            seen.caused[endpoint] = {m: c for m, c in caused.items() if m not in judged}
        for endpoint, ended in seen.outcomes.items():
            seen.outcomes[endpoint] = {m: e for m, e in ended.items() if m not in judged}
        return seen

    async def _check(self, seen: Observation, reference: Observation) -> list[Violation]:
        expected = _excused(seen, reference, self.endpoints[0])
        found = check(seen, expected, client=CLIENT, residue=self.config.residue_checked)
        return found + check_sagas(seen, reference) + check_cancels(seen, reference, client=CLIENT)


def _excused(seen: Observation, reference: Observation, saga: str) -> Observation:
    """The fault-free run as ``seen`` may legitimately differ from it: a timeout its instance
    handled before completing was no longer pending, so the completion sent no cancel for it
    (any other missing cancel stays a difference: ConsistentOutput)."""
    handled = any(
        end.endpoint == saga and end.outcomes == [PROCESSED] for end in seen.cancellable.values()
    )
    if not handled:
        return reference
    sent = {c for caused in seen.caused.values() for each in caused.values() for c in each}
    unsent = reference.cancel_commands - sent
    caused = {
        endpoint: {m: [c for c in each if c not in unsent] for m, each in by_message.items()}
        for endpoint, by_message in reference.caused.items()
    }
    return replace(reference, caused=caused)
