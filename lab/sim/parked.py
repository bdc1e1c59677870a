"""The parked phase: messages waiting in a poison queue while the cleanup's poison task
(``shared.cleanup.parked.PoisonQueue``) runs beside an operator's replay and discard.

Setup leaves the entry endpoint's three messages parked the ways production parks them:

- ``m0`` by the bus, by reference (the form ``shared.bus.poison.park`` uses for a signal too
  large to sit beside its reason): its signal in a blob of the parked container, the entry
  naming it, with no expiry. The simulator's signals are small, so the blob and the entry are
  written with the same helpers ``park`` uses rather than by ``park`` itself;
- ``m1`` by the Functions host after ``maxDequeueCount``: the raw signal moved to
  ``<queue>-poison`` with the queue's default time-to-live of seven days;
- ``m2`` by the bus through ``park`` (inline, no expiry);

and one parked original no entry refers to (a replay whose deletion of the blob was lost).

During the run an operator replays ``m0`` and ``m1`` (``replay_report``, what ``bus
replay`` runs, selecting by message id as ``bus replay --id`` does) and discards ``m2``
(``discard_parked``, what ``bus poison discard --id`` runs: it archives the entry with its
token's envelope, then deletes the token and the entry), each one scheduled process among
the invocations that process what the replay sends and the cleanup passes
(``SimConfig.sweeps``), which now also run the poison task.
Faults and interleavings are the scheduler's, as in every phase.

Time: the cleanup runs at least once per margin (``CLEANUP_POISON_EXPIRY_MARGIN_SECONDS``).
The run starts almost one margin after the messages were parked (less the most the run may
take besides its jumps), so the host's seven-day entry is due for re-parking and the parked
originals are past the grace period. While nothing runs and the endpoints' queues are empty,
time may jump (``SimConfig.waits``, free like the redelivery's wait): every hold runs out, a
cleanup pass runs, then time moves on by the rest of one margin, so an entry that pass did
not re-park, if it was due, expires. The queue drops an entry at its expiry as Azure does;
a drop is counted by comparing the poison queue's length across every advance of the clock
(nothing else runs then).

At the end, after the usual final pass, every hold runs out and one more pass runs; then the
invariants of ``lab.sim.invariants.check_parked`` are checked beside the usual ones.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import timedelta

from lab.sim.cleanup import clean_parked
from lab.sim.invariants import (
    Observation,
    ParkedObservation,
    Violation,
    check,
    check_parked,
    observe_parked,
)
from lab.sim.world import CLIENT, Action, World
from shared.bus.discard import Discard, DiscardFilter, DiscardPlaces, discard_parked
from shared.bus.envelope import Signal
from shared.bus.poison import (
    NEVER_EXPIRES,
    Reason,
    park,
    reference_body,
    replay_report,
    unwrap,
)
from shared.cleanup.parked import HOLD_SECONDS
from shared.cleanup.settings import CleanupSettings
from shared.cli.poison_commands import PoisonFilter
from shared.clock import to_datetime
from shared.resources import poison_queue
from shared.stores.account import StorageAccount

MARGIN = CleanupSettings().poison_expiry_margin_seconds
"""The cleanup's margin (``CLEANUP_POISON_EXPIRY_MARGIN_SECONDS``, its default)."""
REPLAYED = ("m0", "m1")
DISCARDED = "m2"
REPLAY = Action("operator", 1.0, queue="replay")
DISCARD = Action("operator", 1.0, queue="discard")
ARCHIVE_KEPT = timedelta(days=90)
"""How long the discard archive keeps what the operator discards (its default)."""


def _message_id(raw: str) -> str:
    return Signal.parse(raw).message_id


def original_name(endpoint: str, number: int) -> str:
    """A parked original's name as ``parked_name`` makes it, drawn from a counter so that
    every run names it alike."""
    return f"{endpoint}/{uuid.UUID(int=number)}"


@dataclass
class ParkedWorld(World):
    """A ``World`` whose messages start parked (see the module)."""

    poison_margin: float = MARGIN
    """The margin the cleanup is configured with (a variant may change it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.expired = 0
        self.parked = ParkedObservation()
        self.operators_started: set[str] = set()
        self.parked_signals: dict[str, Signal] = {}
        """Logical name -> the signal of each parked message."""
        self._poison = poison_queue(self.sim.entry)
        self._container = self.bus_config.parked_container

    # -- setup ---------------------------------------------------------------------------------

    async def setup(self) -> None:
        await super().setup()
        await self.account.blob_container(self._container).create_if_missing()
        await self.account.blob_container(self.bus_config.discarded_container).create_if_missing()
        queue = self.account.queue(self.sim.entry)
        received = await queue.receive(32, visibility_timeout=self.config.lease)
        for message in received:
            await queue.delete(message.id, message.pop_receipt)
        await self._park({f"m{n}": m.content for n, m in enumerate(received)})  # as sent

    async def _park(self, signals: dict[str, str]) -> None:
        """``m0`` by reference, ``m1`` by the host's move, ``m2`` by ``park``; and an orphan."""
        entry, tries = self.sim.entry, self.config.max_dequeue_count
        poison = self.account.queue(self._poison)
        blobs = self.account.blob_container(self._container)
        await blobs.upload(original_name(entry, 1), signals["m0"].encode("utf-8"))
        why = Reason(entry, "parked by the bus", tries, message_id=_message_id(signals["m0"]))
        await poison.send(reference_body(why, original_name(entry, 1)), time_to_live=NEVER_EXPIRES)
        await poison.send(signals["m1"])  # the host's move: the queue's default time-to-live
        discarded = signals[DISCARDED]
        why = Reason(entry, "parked by the bus", tries, message_id=_message_id(discarded))
        await park(self.account, discarded, why, self._container)
        await blobs.upload(original_name(entry, 2), b"a replayed message's original")

    async def _drive(self) -> list[Violation] | None:
        # Set up here or copied from a world that was: the entries name the messages.
        entries = await self.account.queue(self._poison).peek(32)  # in the order parked
        blobs = self.account.blob_container(self._container)
        for number, entry in enumerate(entries):
            parked = unwrap(entry.content, self.sim.entry)
            signal = parked.signal
            if signal is None and parked.original is not None:
                signal = (await blobs.read(parked.original)).data.decode("utf-8")
            self.parked_signals[f"m{number}"] = Signal.parse(signal or "")
        await self._advance(MARGIN - self._slack())
        self.trace.append(
            f"{len(self.trace):4} the run starts one expiry margin after the messages were "
            "parked (less what the run may take): the host's move is due for re-parking"
        )
        return await super()._drive()

    # -- the operator --------------------------------------------------------------------------

    async def enabled(self) -> list[Action]:
        actions = await super().enabled()
        waiting = [a for a in (REPLAY, DISCARD) if a.queue not in self.operators_started]
        later = next(
            (i for i, a in enumerate(actions) if a.kind in ("tick", "sweep", "duplicate")),
            len(actions),
        )
        return actions[:later] + waiting + actions[later:]

    async def perform(self, action: Action) -> None:
        if action.kind != "operator":
            await super().perform(action)
            return
        number = len(self.trace)
        self._queues = {}
        self.operators_started.add(action.queue)
        body = self._replay if action is REPLAY else self._discard
        self._current = await self.scheduler.spawn(
            f"{action.queue}{len(self.scheduler.processes)}", body, self.now()
        )
        self._spawned(number, self._current)

    @property
    def _discarded(self) -> Signal:
        return self.parked_signals[DISCARDED]

    async def _replay(self) -> str:
        ids = frozenset(self.parked_signals[n].message_id for n in REPLAYED)
        chosen = PoisonFilter(message_ids=ids)
        report = await replay_report(
            self.instrumented, self.sim.entry, 1000, self._container, select=chosen
        )
        return f"replayed {report.replayed}, skipped {len(report.skipped)}"

    async def _discard(self) -> str:
        """The operator discards ``m2`` as ``bus poison discard --id`` does
        (``discard_parked``): archives it with its token's envelope, deletes its token, then
        the entry, and shows the others again."""
        poison = self.instrumented.queue(self._poison)
        places = DiscardPlaces.of(self.instrumented, self.bus_config)
        why = Discard(
            "discarded by the operator",
            "operator",
            to_datetime(self.now()),
            ARCHIVE_KEPT,
        )
        chosen = DiscardFilter(message_id=self._discarded.message_id)
        done = (await discard_parked(poison, self.sim.entry, chosen, places, why)).discarded
        return f"discarded {len(done)}, token removed {sum(d.token_removed for d in done)}"

    # -- the cleanup and time ------------------------------------------------------------------

    async def _cleanup(
        self, account: StorageAccount, grace: float, window: float, app: str | None = None
    ) -> None:
        await super()._cleanup(account, grace, window, app)
        await clean_parked(
            account,
            self.sim.entry,
            self.bus_config,
            grace_seconds=grace,
            margin_seconds=self.poison_margin,
            clock=self.bus_config.clock,
        )

    async def _advance(self, seconds: float) -> None:
        poison = self.account.queue(self._poison)
        before = await poison.approximate_count()
        await super()._advance(seconds)
        self.expired += before - await poison.approximate_count()

    async def _wait_allowed(self) -> bool:
        """Time may jump only while nothing runs or is held and the endpoints' queues are
        empty: a signal left in a queue for a week expires there as in production, which is
        no concern of the parked phase."""
        if self.waited >= self.config.waits or self.scheduler.live() or self._unlanded():
            return False
        return not any(v or h for v, h in (await self._queue_state()).values())

    async def _wait(self) -> None:
        """Every hold runs out, a cleanup pass runs, and time moves on, so that the next pass
        (the next jump's, or the final one) comes at most one margin after this one."""
        await self._advance(HOLD_SECONDS + 1)
        await self._cleanup(self.quiet_account, self.config.sweep_grace, self.config.window)
        await self._advance(MARGIN - self._slack())
        self.waited += 1
        self._queues = {}
        self.fingerprint.barrier("margin")
        self.trace.append(
            f"{len(self.trace):4} the holds run out, a cleanup pass runs, and time passes to "
            "one expiry margin after it"
        )

    def _slack(self) -> float:
        """The most time that may pass after a jump's pass before the next pass begins other
        than by a jump: every tick, the final grace period and the hold before the last pass."""
        config = self.config
        return HOLD_SECONDS + 1 + config.max_ticks * config.tick + config.sweep_grace + 1

    # -- the end -------------------------------------------------------------------------------

    async def _observe(self) -> Observation:
        seen = await super()._observe()
        await self._advance(HOLD_SECONDS + 1)
        await self._cleanup(self.quiet_account, self.config.sweep_grace, self.config.window)
        self.parked = await observe_parked(
            self.account, self.sim.entry, self._container, self.expired
        )
        return seen

    async def _check(self, seen: Observation, reference: Observation) -> list[Violation]:
        parked: ParkedObservation = self.parked
        applied = {a.name for a in seen.applied.get(self.sim.entry, [])}
        excused = {n for n in self.parked_signals if n not in applied}
        # A message left parked keeps its token; a discarded one (no longer parked) took its
        # token with it: a token of it left over is residue (BoundedResidue).
        still_parked = {e.message_id for e in parked.entries}
        waiting = {
            self.parked_signals[n].token
            for n in excused
            if n != DISCARDED or self._discarded.message_id in still_parked
        }
        tokens = [t for t in seen.tokens if t not in waiting]
        found = check(
            dataclasses.replace(seen, tokens=tokens),
            reference,
            client=CLIENT,
            residue=self.config.residue_checked,
            excused=excused,
            parked_checked=True,
        )
        kept = {self.parked_signals[n].message_id: n for n in REPLAYED}
        return found + check_parked(seen, parked, self.sim.entry, kept)
