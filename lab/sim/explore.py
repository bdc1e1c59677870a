"""Exploration: exhaustive search of small configurations and seeded random search of larger
ones, over the in-memory stores.

A run is named by a seed string that replays it exactly:
- ``<config>:<d>.<d>...`` for a run of a named configuration (``CONFIGS``) given its
  decisions (what exhaustive search prints);
- ``<n>`` (an integer) for random search: the configuration and every decision are drawn
  from ``n``;
- ``<config>@<n>`` for random decisions drawn from ``n`` over a named configuration.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from lab.sim.cancels import CancelWorld
from lab.sim.choices import Chooser, DepthFirst, Replay, Seeded
from lab.sim.claim_by_delete import ClaimByDelete
from lab.sim.invariants import Observation
from lab.sim.model import SHAPES
from lab.sim.parked import ParkedWorld
from lab.sim.readings import WINDOW_MODES
from lab.sim.sagas import SagaWorld
from lab.sim.sessions import SessionWorld
from lab.sim.variants import Variant
from lab.sim.world import (
    ALL_FAULTS,
    Prepared,
    RunResult,
    SimConfig,
    World,
    quiet_logs,
    reference_run,
)
from shared.bus.app import MODES, Mode, Store
from shared.bus.retries import RetryPolicy
from shared.clock import ManualClock
from shared.errors import ConfigurationError
from shared.stores.memory import MemoryStorageAccount

CONFIGS: dict[str, SimConfig] = {
    config.name: config
    for config in (
        # The small configuration: one message, two concurrent copies, one output.
        SimConfig(name="small", shape="single", messages=1, copies=2, concurrency=2),
        # The same with a cleanup pass that may start at any point, and time that may pass.
        SimConfig(name="small-sweep", shape="single", copies=2, concurrency=2, sweeps=1),
        # A client's retry racing its original: two scheduled sends with one idempotency
        # key, faults at their creates, commit and sends, then the message's processing.
        SimConfig(name="small-ingress", shape="single", copies=1, client_sends=2),
        # A client's retries after the upgrade: the previous version committed the message's
        # record under the raw key and stopped before its signal; two racing retries find it
        # (the read of the unscoped record) and send the signal, faults included.
        SimConfig(
            name="small-ingress-legacy",
            shape="single",
            copies=1,
            client_sends=2,
            legacy_record=True,
            key_scopes=True,
        ),
        # Two senders that chose one idempotency key (issue 34): each sends its own message
        # under its own scope, faults at the reads of the scoped and the previous version's
        # record included; both messages are processed, once.
        SimConfig(
            name="small-ingress-scopes",
            shape="single",
            messages=2,
            copies=1,
            client_sends=1,
            shared_key=True,
            key_scopes=True,
        ),
        # Three messages on one partition: once the first created the state, the other two
        # update it concurrently.
        SimConfig(name="small-partition", shape="single", messages=3, partitions=1, copies=1),
        # A redelivery after the grace period: a crash leaves the message hidden, time jumps
        # past the grace period (free, see ``SimConfig.waits``) with a cleanup pass, and a
        # scheduled cleanup pass may also run at any point.
        SimConfig(name="small-redelivery", shape="single", copies=1, sweeps=1, waits=1),
        # A delayed message (first -> second, due 60 s after first processed its message):
        # crashes between its delayed send and R7, copies and redeliveries; none processed
        # early (NoEarlyDelivery), none lost or duplicated.
        SimConfig(name="small-delay", shape="single", copies=2, delay=60.0),
        # second's handler fails twice per message under 1 immediate and 1 delayed retry:
        # applied once, its outputs sent once, across crashes and copies.
        SimConfig(
            name="small-retry",
            shape="chain",
            copies=1,
            failures=2,
            retry=RetryPolicy(immediate=1, delays=(40.0,), jitter=0.0),
        ),
        # second's handler grows its state over a table property on its first run (issue
        # 35), under the same policy: parked on that try with nothing committed, replayed by
        # the operator once quiet, then applied once, its outputs sent once.
        SimConfig(
            name="small-oversized",
            shape="chain",
            copies=1,
            oversized=1,
            retry=RetryPolicy(immediate=1, delays=(40.0,), jitter=0.0),
        ),
        # A rolling deploy (issue 29): second is served by the new version and by an old one
        # whose app does not know Step; the old one gives back what it cannot read, hidden
        # for a while, and the new one processes it. Crashes between the re-send and the
        # acknowledgement, failed re-sends, copies: nothing lost, parked, misread or
        # processed twice.
        SimConfig(name="small-rolling", shape="single", copies=1, duplicates=1, rolling=True),
        # An effect (docs/effects.md): two copies of a message whose handler requests a
        # charge; the performer calls the provider after the commit (a scheduled operation,
        # faulted and landing late like a write) and the answer comes back to the handler.
        SimConfig(name="small-effect", shape="effect", messages=1, copies=2, concurrency=2),
        # The same with a service that honours no idempotency key, declared at-most-once:
        # the performer marks the effect before its one call and answers uncertain when the
        # marker was there or the call's outcome is unknown (EffectsAppliedAtMostOnce).
        SimConfig(
            name="small-effect-amo",
            shape="effect",
            messages=1,
            copies=2,
            concurrency=2,
            at_most_once=True,
        ),
        # A system of two apps (issue 44) over one messaging store, each with its rows in its
        # own store and its own cleanup: A (first) sends a Step to B's second and publishes
        # Happened to B's third and fourth. Both apps' cleanups may run at any point, at the
        # same time, and time may pass beyond the grace period with a pass of each while a
        # message of B's is hidden: each cleanup lists the other's tokens in the shared
        # container and must leave them to their own app.
        SimConfig(name="small-two-apps", shape="mixed", copies=1, sweeps=2, waits=1, apps=2),
        # Outside the timing assumptions: a process may also stall before any operation for
        # longer than the grace period (a paused machine) while a cleanup pass runs. Not
        # part of the default exploration: the cleanup's safety rests on those assumptions
        # (docs/design.md, section 7). The known-bad variants use it to show what the claim
        # protects.
        # The parked phase (lab/sim/parked.py): three messages start parked (by the bus by
        # reference, by the host's move with its seven-day expiry, by the bus inline) beside
        # an orphan original; an operator replays two and discards the third while the
        # cleanup's poison task runs (a scheduled pass, and a pass at each jump of one expiry
        # margin while nothing runs). Ten ticks bring back whatever a crashed replay or pass
        # held (120 s at most), and a crashed invocation's message, a few times over.
        SimConfig(
            name="small-parked",
            shape="single",
            messages=3,
            copies=1,
            sweeps=1,
            waits=1,
            max_ticks=10,
            parked=True,
        ),
        # One payload per publish (lab/sim/payloads.py): first publishes an event whose
        # envelope is longer than a signal carries to second and third, which share one
        # payload blob. Faults at every operation (the payload's write and reads included),
        # a cleanup pass and time passing at any point, a duplicate signal on the network.
        SimConfig(
            name="small-shared",
            shape="shared",
            copies=1,
            concurrency=2,
            sweeps=1,
            waits=1,
            duplicates=1,
        ),
        # The body budget (shared/bus/budget.py) with room for one shared payload: the two
        # subscribers' invocations overlap, and the one that finds no room postpones its
        # message (sends its signal again, hidden, and acknowledges its copy).
        SimConfig(
            name="small-budget",
            shape="shared",
            copies=1,
            concurrency=2,
            waits=1,
            duplicates=1,
            body_budget=12_000,
        ),
        # The app's state store down for a span of the run (issue 44): its first three
        # requests time out, more deliveries than the host's two tries. Each delivery gives
        # the message back to wait for the store, spending no try; none is parked.
        SimConfig(
            name="small-state-outage",
            shape="single",
            copies=1,
            state_outage=3,
            max_dequeue_count=2,
        ),
        # The same outside the timing assumptions, as small-unbounded-sweep: a round may
        # stall for longer than the grace period while cleanup passes run, and the payload
        # task must still never remove a payload a committed token refers to.
        SimConfig(
            name="small-shared-unbounded",
            shape="shared",
            copies=1,
            concurrency=2,
            sweeps=2,
            sweep_grace=30.0,
            faults=ALL_FAULTS,
            timing="unbounded",
        ),
        SimConfig(
            name="small-unbounded",
            shape="single",
            copies=2,
            concurrency=2,
            faults=ALL_FAULTS,
            timing="unbounded",
        ),
        # Outside the timing assumptions with cleanup passes running while copies are in
        # flight and a short grace period: shows that the cleanup's safety depends on a
        # committing round finishing within the grace period (docs/design.md, section 7).
        SimConfig(
            name="small-unbounded-sweep",
            shape="single",
            copies=2,
            concurrency=2,
            sweeps=2,
            sweep_grace=30.0,
            faults=ALL_FAULTS,
            timing="unbounded",
        ),
    )
}

# Transactional sessions (issue 45, lab.sim.sessions): three web requests of the session
# endpoint ``first``. m0 is sent twice under its key (a request racing its retry, or a retry
# after the first failed) and commits its order row with a Step and a Happened for token-mode
# receivers; m1 does the same, sent once (its client gives up: the cleanup's resend is what
# finishes it); m2 fails inside its block and rolls back. A cleanup pass (with the sessions
# task) at any point, time passing the resend delay, and a late retry after the grace period.
CONFIGS["small-session"] = SimConfig(
    name="small-session",
    shape="single",
    messages=3,
    partitions=3,
    copies=1,
    client_sends=2,
    client_retries=0,
    sweeps=1,
    waits=1,
    session=True,
    session_rollbacks=1,
)
# The same with the endpoints' rows, the session's included, in PostgreSQL (its model).
CONFIGS["small-session-postgres"] = replace(
    CONFIGS["small-session"], name="small-session-postgres", store="postgres"
)
# Outside the timing assumptions: a request may stall before any operation (its commit, say)
# for longer than the grace period while a cleanup pass runs; it must then fail to commit.
# Not in the default plan; it shows what retiring an open O(s) first protects.
CONFIGS["small-session-unbounded"] = SimConfig(
    name="small-session-unbounded",
    shape="single",
    copies=1,
    client_sends=1,
    sweep_grace=30.0,
    faults=ALL_FAULTS,
    timing="unbounded",
    session=True,
)

# Sagas (issue 46, lab.sim.sagas): a saga instance started by m0, a reply that reaches it
# through the reply header, a message to itself that completes it and then a second starting
# message for it (a new id, the same correlation: a client's retry under a new key); m1 is
# for an instance nobody starts. Two copies of each client message, two invocations at once,
# a cleanup pass at any point, faults at every storage operation.
CONFIGS["small-saga"] = SimConfig(
    name="small-saga",
    shape="single",
    messages=2,
    copies=2,
    concurrency=2,
    sweeps=1,
    duplicates=1,
    waits=1,
    saga=True,
)
# The same with the endpoints' rows, the instances' included, in PostgreSQL (its model).
CONFIGS["small-saga-postgres"] = replace(
    CONFIGS["small-saga"], name="small-saga-postgres", store="postgres"
)

# Cancellation (issue 46, lab.sim.cancels): a saga's timeout, a Remind the saga sends with a
# delay and keeps the handle of, and the client's delayed m1, each racing its cancel (the
# completion, ctx.cancel through bus.CancelScheduled, the client's cancel by key) while time
# passes and makes each due; two copies of m0, a network duplicate, a late redelivery, a
# cleanup pass at any point, faults at every storage operation, the cancel's included.
CONFIGS["small-cancel"] = SimConfig(
    name="small-cancel",
    shape="single",
    messages=2,
    copies=2,
    concurrency=2,
    sweeps=1,
    duplicates=1,
    waits=1,
    saga=True,
    cancel=True,
)
# The same with the endpoints' rows in PostgreSQL (its model).
CONFIGS["small-cancel-postgres"] = replace(
    CONFIGS["small-cancel"], name="small-cancel-postgres", store="postgres"
)
# Outside the timing assumptions: a process (a canceller among them) may stall before any
# operation until the grace period and the audit retention have passed and a cleanup pass
# has run. Not in the default plan; it shows what the cancel's token claim (C4) protects.
CONFIGS["small-cancel-unbounded"] = replace(
    CONFIGS["small-cancel"],
    name="small-cancel-unbounded",
    copies=1,
    duplicates=0,
    waits=0,
    faults=ALL_FAULTS,
    timing="unbounded",
)

# The same small configurations for every window mode (``small-processed_messages``, ...):
# bounded timing keeps the whole run inside the dedup window (``SimConfig.window``). The
# unbounded one lets a stalled process wake up past the window: not part of the default
# exploration, it shows the late duplicate those modes document.
for _mode in WINDOW_MODES:
    for _base in (
        "small",
        "small-sweep",
        "small-unbounded",
        "small-ingress",
        "small-partition",
        "small-redelivery",
        "small-shared",
        "small-rolling",
    ):
        _config = replace(CONFIGS[_base], name=f"{_base}-{_mode}", mode=_mode)
        CONFIGS[_config.name] = _config


# The endpoints' rows in PostgreSQL (its in-memory model): the same configurations, the
# same invariants, in token mode (``small-postgres``) and in each window mode
# (``small-postgres-processed_messages``, ...).
for _base in ("small", "small-sweep"):
    _config = replace(CONFIGS[_base], name=f"{_base}-postgres", store="postgres")
    CONFIGS[_config.name] = _config
for _base in ("small", "small-sweep", "small-partition"):
    # small-partition: concurrent messages of one partition, where the row versions decide.
    for _mode in WINDOW_MODES:
        _config = replace(
            CONFIGS[f"{_base}-{_mode}"], name=f"{_base}-postgres-{_mode}", store="postgres"
        )
        CONFIGS[_config.name] = _config

# The endpoints' rows in the document stores (issue 47): one JSON document per partition,
# written under its ETag, in the Cosmos DB model (``-cosmos``) or as blobs of the account
# (``-blob``); the configurations PostgreSQL's model runs, and token mode's small-partition
# (messages of one partition, where the rows' own versions inside the document decide).
DOCUMENT_STORES: tuple[Store, ...] = ("cosmos", "blob")
for _store in DOCUMENT_STORES:
    for _base in ("small", "small-sweep", "small-partition"):
        _config = replace(CONFIGS[_base], name=f"{_base}-{_store}", store=_store)
        CONFIGS[_config.name] = _config
        for _mode in WINDOW_MODES:
            _config = replace(
                CONFIGS[f"{_base}-{_mode}"], name=f"{_base}-{_store}-{_mode}", store=_store
            )
            CONFIGS[_config.name] = _config
    for _phase in ("session", "saga", "cancel"):
        _config = replace(CONFIGS[f"small-{_phase}"], name=f"small-{_phase}-{_store}", store=_store)
        CONFIGS[_config.name] = _config


# Mixed-mode apps (issue 42): the first endpoint sends in one mode to a receiver in another,
# every pairing of two different modes (``pair-<sender>-<receiver>``; a mode paired with
# itself is ``small``/``small-<mode>``). Two copies of one message, a cleanup pass and time
# that may pass at any point: a crashed round's tokens, the receiver's claim or delete of its
# incoming token and each side's cleanup meet in one run.
PAIRINGS: tuple[tuple[Mode, Mode], ...] = tuple(
    (sender, receiver) for sender in MODES for receiver in MODES if sender != receiver
)
for _sender, _receiver in PAIRINGS:
    _config = SimConfig(
        name=f"pair-{_sender}-{_receiver}",
        shape="single",
        mode=_sender,
        receiver_mode=_receiver,
        copies=2,
        concurrency=2,
        sweeps=1,
    )
    CONFIGS[_config.name] = _config


# Token mode claiming by the token's conditional delete (issue 33, ``lab.sim.claim_by_delete``),
# one configuration per candidate rule: two copies of one message, and time that may jump past
# the grace period (with a cleanup pass) while a copy is hidden, so that a copy can come back
# after the cleanup retired what the first copy left. Not in the default plan.
CLAIM_BY_DELETE: dict[str, ClaimByDelete] = {
    "resume": ClaimByDelete(on_gone="resume"),
    "unless-inserted": ClaimByDelete(on_gone="resume-unless-inserted"),
    "duplicate": ClaimByDelete(on_gone="duplicate"),
    "retire": ClaimByDelete(on_gone="resume-unless-inserted", uncommitted="retire"),
    "read-first": ClaimByDelete(read_first=True),
}
for _rule, _protocol in CLAIM_BY_DELETE.items():
    _config = SimConfig(
        name=f"claim-by-delete-{_rule}",
        shape="single",
        copies=2,
        concurrency=2,
        waits=1,
        wait_outlasts_audit=True,
        claim_by_delete=_protocol,
    )
    CONFIGS[_config.name] = _config
# read-first outside the timing assumptions: a copy that stalls between its read of the token
# and its insert of O(m) for longer than the grace period.
_config = replace(
    CONFIGS["claim-by-delete-read-first"],
    name="claim-by-delete-read-first-unbounded",
    waits=0,
    sweeps=1,
    sweep_grace=30.0,
    faults=ALL_FAULTS,
    timing="unbounded",
)
CONFIGS[_config.name] = _config


def config_named(name: str) -> SimConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ConfigurationError(
            f"no simulation configuration {name!r}; known: {sorted(CONFIGS)}"
        ) from None


@dataclass
class Summary:
    schedules: int = 0
    faults: int = 0
    violations: int = 0
    seconds: float = 0.0
    """CPU time spent (``time.process_time``)."""
    failures: list[tuple[str, RunResult]] = field(default_factory=list)
    """(seed, result) of the first violating runs."""
    classes: set[tuple[str, int]] = field(default_factory=set)
    """(configuration, fingerprint) of every complete run: its equivalence class."""
    pruned: int = 0
    """Runs cut short because an equivalent state was already explored."""

    def add(self, seed: str, result: RunResult, keep: int = 5) -> None:
        if result.pruned:
            self.pruned += 1
            return
        self.schedules += 1
        self.classes.add((result.config.name, result.fingerprint))
        self.faults += result.faults
        if not result.ok:
            self.violations += 1
            if len(self.failures) < keep:
                self.failures.append((seed, result))

    def merge(self, other: Summary) -> None:
        self.schedules += other.schedules
        self.seconds += other.seconds
        self.faults += other.faults
        self.violations += other.violations
        self.failures += other.failures[: max(0, 5 - len(self.failures))]
        self.classes |= other.classes
        self.pruned += other.pruned

    @property
    def distinct(self) -> int:
        """Complete runs that no earlier one was equivalent to: distinct schedules."""
        return len(self.classes)

    @property
    def line(self) -> str:
        return (
            f"simulation: schedules={self.schedules} faults={self.faults} "
            f"violations={self.violations}"
        )

    @property
    def rate(self) -> str:
        """Schedules and distinct schedules per second of CPU (figures that do not depend
        on the machine's other load as wall-clock time does)."""
        seconds = self.seconds or float("inf")
        return (
            f"{self.schedules / seconds:.0f} schedules per second, "
            f"{self.distinct / seconds:.0f} distinct schedules per second "
            f"({self.distinct} distinct, {self.pruned} runs pruned, "
            f"{self.seconds:.1f} s of CPU)"
        )


@dataclass
class Reduction:
    """Skips the continuations of a state that an equivalent one already had explored.

    Depth-first search asks ``covered`` before every action of a run with the run's decision
    state (``World.decision_state``: the trace so far up to the order of independent events
    and the actions enabled now). Two runs that meet the same decision state have the same
    continuations, so a run is cut when an earlier run met its state with at least as many
    deviations and faults left and the whole subtree below that earlier state is explored
    (the search has backtracked above it: ``finish``). Only then is it safe: a state of the
    run's own prefix is recorded again by every run below it."""

    explored: dict[Hashable, list[tuple[int, int]]] = field(default_factory=dict)
    pending: list[tuple[int, Hashable, tuple[int, int]]] = field(default_factory=list)
    """(decision position, state, budget left) met by the current run."""

    def covered(self, state: Hashable, chooser: DepthFirst) -> bool:
        if len(chooser.decisions) < len(chooser.prefix):
            return False  # never cut a run before the decision it was started to take
        budget = (
            chooser.max_deviations - chooser.deviations,
            chooser.max_faults - chooser.faults,
        )
        for deviations, faults in self.explored.get(state, ()):
            if deviations >= budget[0] and faults >= budget[1]:
                return True
        self.pending.append((len(chooser.decisions), state, budget))
        return False

    def finish(self, next_prefix: list[int] | None) -> None:
        """The run is over and the search goes on with ``next_prefix``: the states met
        after the decision it changes have their whole subtrees explored."""
        changed = -1 if next_prefix is None else len(next_prefix) - 1
        for position, state, budget in self.pending:
            if position > changed:
                self.explored.setdefault(state, []).append(budget)
        self.pending.clear()


def _world_type(config: SimConfig) -> type[World]:
    if config.session:
        return SessionWorld
    if config.cancel:
        return CancelWorld
    if config.saga:
        return SagaWorld
    return ParkedWorld if config.parked else World


def _reference_world(config: SimConfig) -> type[World] | None:
    """The world of a fault-free run: the phase's own where its app is its own (sessions,
    sagas), else ``World``'s (the parked phase's messages are simply processed there)."""
    if config.session:
        return SessionWorld
    if config.cancel:
        return CancelWorld
    return SagaWorld if config.saga else None


_references: dict[tuple[object, ...], Observation] = {}


async def reference_for(config: SimConfig) -> Observation:
    """The fault-free outcome of ``config``'s messages (cached: it depends on the shape,
    modes, message count, partitions and the effect's kind only)."""
    key = (
        config.shape,
        config.mode,
        config.receivers,
        config.messages,
        config.partitions,
        config.at_most_once,
        config.session,
        config.session_rollbacks,
        config.saga,
        config.cancel,
    )
    if key not in _references:
        clock = ManualClock()
        world_type = _reference_world(config)
        _references[key] = await reference_run(
            config, MemoryStorageAccount(clock=clock), clock, world_type=world_type
        )
    return _references[key]


_set_ups: dict[SimConfig, tuple[MemoryStorageAccount, Prepared]] = {}
SET_UPS_KEPT = 8
"""Configurations whose set-up account is kept: an exhaustive search runs one configuration
thousands of times; a random search draws a new one for every run."""


async def set_up(config: SimConfig) -> tuple[MemoryStorageAccount, Prepared]:
    """An in-memory account as ``World.setup`` leaves it for ``config``, and what else setup
    left behind (cached: setup depends on the configuration only, and takes as long as a few
    steps of a run; each run works on a copy of the account)."""
    if config not in _set_ups:
        clock = ManualClock()
        account = MemoryStorageAccount(clock=clock)
        world = _world_type(config)(config, Replay([]), account, clock)
        with quiet_logs():
            await world.setup()
        while len(_set_ups) >= SET_UPS_KEPT:
            del _set_ups[next(iter(_set_ups))]
        _set_ups[config] = (account, world.after_setup())
    return _set_ups[config]


async def simulate(
    config: SimConfig,
    chooser: Chooser,
    variant: Variant | None = None,
    covered: Callable[[Hashable], bool] | None = None,
) -> RunResult:
    """One run on fresh in-memory stores (a copy of the set-up ones: ``set_up``), checked
    against the reference (``covered``: see ``World.covered``)."""
    reference = await reference_for(config)
    template, prepared = await set_up(config)
    clock = ManualClock()
    world = _world_type(config)(
        config,
        chooser,
        template.copy(clock),
        clock,
        wrap=variant.wrap if variant is not None else None,
        retention=variant.retention if variant is not None else None,
        old_version=variant.old_version if variant is not None else "old",
        old_window=variant.old_window if variant is not None else None,
        attempt_keys=variant is not None and variant.attempt_keys,
        effect_before_commit=variant is not None and variant.effect_before_commit,
        answer_outside=variant is not None and variant.answer_outside,
        amo_retried=variant is not None and variant.amo_retried,
        foreign_origins_own=variant is not None and variant.foreign_origins_own,
        covered=covered,
        **_session_parts(variant),
        receiver_class=None if variant is None else variant.receiver,
        canceller_class=None if variant is None else variant.canceller,
        documents_wrap=None if variant is None else variant.documents,
        prepared=prepared,
    )
    if isinstance(world, ParkedWorld) and variant is not None and variant.poison_margin is not None:
        world.poison_margin = variant.poison_margin
    with quiet_logs():
        return await world.run(reference)


def _session_parts(variant: Variant | None) -> dict[str, Any]:
    """The session phase's session and sessions task a variant replaces, if any."""
    if variant is None:
        return {}
    parts: dict[str, Any] = {}
    if variant.session is not None:
        parts["session_class"] = variant.session
    if variant.session_task is not None:
        parts["session_task"] = variant.session_task
    return parts


def exhaustive_seed(config: SimConfig, decisions: list[int]) -> str:
    """Trailing default decisions are left out: a replay takes the defaults after the end."""
    kept = list(decisions)
    while kept and kept[-1] == 0:
        kept.pop()
    return f"{config.name}:{'.'.join(map(str, kept)) or '-'}"


async def exhaustive(
    config: SimConfig,
    *,
    max_deviations: int,
    max_faults: int,
    variant: Variant | None = None,
    stop_at_first: bool = False,
    stop_when: Callable[[RunResult], bool] | None = None,
    progress: Callable[[Summary], None] | None = None,
    limit: int | None = None,
    reduce: bool = False,
) -> Summary:
    """Every decision sequence with at most ``max_deviations`` non-default scheduling
    choices and ``max_faults`` faults, depth first; with ``reduce``, one of each set of
    equivalent ones (``Reduction``)."""
    summary = Summary()
    started = time.process_time()
    reduction = Reduction() if reduce else None
    # Quiet for the whole search: each run's quiet_logs then changes nothing.
    with quiet_logs():
        prefix: list[int] | None = []
        while prefix is not None:
            chooser = DepthFirst(prefix, max_deviations, max_faults)
            covered = None
            if reduction is not None:
                covered = functools.partial(reduction.covered, chooser=chooser)
            result = await simulate(config, chooser, variant, covered)
            prefix = chooser.next_prefix()
            if reduction is not None:
                reduction.finish(prefix)
            summary.add(exhaustive_seed(config, result.decisions), result)
            if result.pruned:
                continue
            if progress is not None and summary.schedules % 500 == 0:
                progress(summary)
            if (stop_at_first and summary.violations) or (stop_when and stop_when(result)):
                break
            if limit and summary.schedules >= limit:
                break
    summary.seconds = time.process_time() - started
    return summary


def random_config(seed: int) -> tuple[SimConfig, Seeded]:
    """A larger configuration in any endpoint mode and a random chooser, both drawn from
    ``seed``. The mode is drawn from a stream of its own, so a seed still draws the shape,
    counts and faults it drew before modes were added."""
    rng = random.Random(f"config:{seed}")
    config = SimConfig(
        name=f"random-{seed}",
        mode=random.Random(f"mode:{seed}").choice(MODES),
        shape=rng.choice(SHAPES),
        messages=rng.randint(1, 4),
        copies=rng.randint(1, 3),
        concurrency=rng.randint(1, 3),
        sweeps=rng.randint(0, 2),
        duplicates=rng.randint(0, 2),
    )
    chooser = Seeded(seed, max_faults=rng.randint(1, 4), fault_rate=rng.choice([0.02, 0.05, 0.1]))
    return config, chooser


def seeded_for(config: SimConfig, seed: int) -> Seeded:
    """Random decisions for a named configuration (seed ``<config>@<n>``)."""
    return Seeded(seed, max_faults=2, fault_rate=0.05)


async def random_search(
    seeds: Iterable[int],
    *,
    config: SimConfig | None = None,
    modes: Collection[Mode] = MODES,
    variant: Variant | None = None,
    deadline: float | None = None,
    stop_at_first: bool = False,
    stop_when: Callable[[RunResult], bool] | None = None,
    progress: Callable[[Summary], None] | None = None,
) -> Summary:
    """Random runs, one per seed; ``stop_when`` ends the search at the first run it accepts.
    Without ``config``, seeds that draw a mode outside ``modes`` are skipped."""
    summary = Summary()
    started = time.process_time()
    with quiet_logs():
        for seed in seeds:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if config is None:
                run_config, chooser = random_config(seed)
                if run_config.mode not in modes:
                    continue
                name = str(seed)
            else:
                run_config, chooser = config, seeded_for(config, seed)
                name = f"{config.name}@{seed}"
            result = await simulate(run_config, chooser, variant)
            summary.add(name, result)
            if progress is not None and summary.schedules % 250 == 0:
                progress(summary)
            if (stop_at_first and summary.violations) or (stop_when and stop_when(result)):
                break
    summary.seconds = time.process_time() - started
    return summary


async def replay(seed: str, variant: Variant | None = None) -> RunResult:
    """Run the one schedule ``seed`` names (as printed by a violation)."""
    if "@" in seed:
        name, _, digits = seed.partition("@")
        if not digits.isdigit():
            raise ConfigurationError(f"seed {seed!r}: expected <config>@<integer>")
        config = config_named(name)
        return await simulate(config, seeded_for(config, int(digits)), variant)
    name, _, decisions = seed.partition(":")
    if not decisions:
        try:
            number = int(seed)
        except ValueError:
            raise ConfigurationError(
                f"seed {seed!r} is neither an integer nor <config>:<decisions>"
            ) from None
        config, chooser = random_config(number)
        return await simulate(config, chooser, variant)
    try:
        recorded = [] if decisions == "-" else [int(d) for d in decisions.split(".")]
    except ValueError:
        raise ConfigurationError(
            f"seed {seed!r}: decisions must be dot-separated integers"
        ) from None
    return await simulate(config_named(name), Replay(recorded), variant)


def report(seed: str, result: RunResult) -> str:
    """What a violation prints: the seed, the broken invariants and the schedule."""
    lines = [f"violation in {result.config.name}, replay with: make simulate SEED={seed}"]
    lines += [f"  {v}" for v in result.violations]
    lines.append("  schedule:")
    lines += [f"    {step}" for step in result.trace]
    return "\n".join(lines)
