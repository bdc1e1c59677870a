"""One simulated run: the real bus over instrumented stores, driven decision by decision.

A run sends its initial messages through the ingress client (no faults there), puts extra
copies of each signal in the queue, and then repeats: list the actions enabled now, ask the
chooser for one, perform it. Actions:

- ``step``: a live process performs its pending storage operation (possibly with a fault
  chosen at that moment) and runs on to its next one;
- ``start``: a new function invocation receives a message from an endpoint queue;
- ``land``: a request held by a ``LATE`` fault reaches the service;
- ``tick``: time passes by one lease, so messages whose invocation crashed or still runs
  become visible again;
- ``sweep``: a cleanup pass starts and interleaves with processing;
- ``duplicate``: the network delivers one more copy of a queued signal.

When nothing is enabled the run is quiet: every queue is empty, every held request has
landed. Time then passes beyond the grace period, one cleanup pass runs, and the invariants
are checked against the reference run. In a window mode (``processed_messages``,
``state_based``, ``entity_outbox``) time then passes beyond the dedup window too and one more
cleanup pass runs, after which the residue of the dedup records is checked.

Timing (``bounded``): a tick is enabled only while every live invocation stays within
``invocation_limit`` seconds of its start and every held request within ``late_limit`` of
being sent, the assumptions the cleanup's grace period rests on. ``unbounded`` timing drops
them (a paused process, a request stuck for hours): safety must still hold, but residue is
then not checked, since bounding it is exactly what those assumptions buy.

The dedup window (``SimConfig.window``) of the window modes: under bounded timing it must
outlast the longest run, so every copy of a message arrives inside its window, which is the
only place those modes promise to recognise one. Under unbounded timing a stalled process
wakes up after the window as well (and after the audit retention), where a window mode may
legitimately process a message again (``docs/modes.md``, "Retention and late duplicates").
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import random
import uuid
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from lab.sim import invocation
from lab.sim.choices import Chooser, Replay
from lab.sim.claim_by_delete import (
    ClaimByDelete,
    ClaimByDeleteBus,
    ClaimedOutboxRecords,
    KeptEnvelopes,
)
from lab.sim.cleanup import cleanup_to_completion, expire_audit_rows
from lab.sim.documents import DocumentsWrapper, SimulatedDocumentDatabase
from lab.sim.fingerprint import TraceFingerprint, locations
from lab.sim.invariants import (
    NO_LOST_MESSAGES,
    UNEXPECTED_ERROR,
    Observation,
    Violation,
    check,
    observe,
)
from lab.sim.model import ENDPOINTS, AtMostOnce, Shape, SimApp, Start, Version, build_app
from lab.sim.payloads import (
    NO_MISSING_PAYLOAD,
    NO_PAYLOAD_READ_BY_COPIES,
    PayloadReads,
    PayloadWatch,
)
from lab.sim.provider import ScheduledProvider
from lab.sim.readings import WINDOW_MODES
from lab.sim.scheduler import REAL_STORE_TIMEOUT, Process, Scheduler
from lab.sim.variants import endpoint_modes, incoming_token
from shared.bus import Bus, BusConfig, Command, Message, RetryPolicy
from shared.bus.app import Mode, Store
from shared.bus.cancel import Canceller
from shared.bus.deliveries import decode_signals, first_format
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.bus.envelope import Signal
from shared.bus.ingress import INGRESS_ROW, IngressClient, record_key
from shared.bus.origin import Origin
from shared.bus.outgoing import ORIGIN_METADATA
from shared.bus.poison import replay
from shared.bus.receiver import Receiver
from shared.bus.session import Session
from shared.bus.state.base import EndpointState
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.bus.state.rows import EndpointRows
from shared.bus.state.stores import endpoint_state, endpoints_rows
from shared.cleanup.base import CleanupTask
from shared.cleanup.sessions import SessionRecords
from shared.clock import ManualClock
from shared.effects.markers import performer_markers
from shared.effects.memory import InMemoryProvider
from shared.errors import ConfigurationError, MalformedSignal
from shared.host_json import QueueSettings
from shared.provisioning import provision
from shared.queue_trigger import QueueWorker
from shared.resources import resources_of
from shared.stores.account import StorageAccount
from shared.stores.instrumented import (
    Fault,
    HeldRequest,
    Instrumentation,
    InstrumentedAccount,
    Operation,
)
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.queue import MessageQueue
from shared.stores.table import Entity

Timing = Literal["bounded", "unbounded"]
CLIENT = "client"
SCOPED_FIELDS = frozenset({"scope", "key", "fingerprint"})
"""What the previous version's ingress records did not hold."""
READS = frozenset(
    {"blob.read", "blob.get_properties", "blob.list", "table.get", "table.query", "sql.query"}
    | {"queue.peek", "queue.count", "cosmos.read", "cosmos.page"}
)
"""Operations that change nothing: a fault after them is the same as a fault before."""
ALL_FAULTS = (Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.ERROR_BEFORE, Fault.ERROR_AFTER)


class Stall(enum.Enum):
    """A fault of the process rather than of a request: under ``unbounded`` timing a process
    may freeze before an operation (a paused machine) until everything else is quiet, time
    has passed beyond the grace period and a cleanup pass has run."""

    STALL = "stall"


STALL = Stall.STALL


@dataclass(frozen=True)
class SimConfig:
    """What one simulated run contains and which faults and timings it may see."""

    name: str = "custom"
    shape: Shape = "single"
    mode: Mode = "token"
    """The endpoint mode of every simulated endpoint (of the first one only when
    ``receiver_mode`` is given)."""
    receiver_mode: Mode | None = None
    """The mode of every endpoint but the first, the one the initial messages go to: a
    mixed-mode app, whose first endpoint sends in ``mode`` to receivers in this one (the
    pairings, ``pair-<sender>-<receiver>``). None: ``mode`` too."""
    store: Store = "table"
    """Where the endpoints keep state, O(m) and audit rows: their tables, PostgreSQL through
    its in-memory model, Cosmos DB through its in-memory model (``MemoryDocumentDatabase``,
    ``lab.sim.documents``) or JSON documents in the account's blobs (``BlobDocuments``);
    every request to them is scheduled and faulted like any storage operation."""
    apps: Literal[1, 2] = 1
    """2: a system of two apps over one messaging store (queues, tokens, topics, payloads;
    ``docs/adopting.md``). The first endpoint and the client are app ``A``'s, with its rows
    in its tables; the others app ``B``'s, with their rows in B's own store (PostgreSQL's
    in-memory model), out of A's reach. Each app has its own cleanup, which may run at the
    same time as the other's: production's token task over the whole shared container,
    judged with its own endpoints' rows and ingress table only, and its endpoints' tasks.
    The bus that processes is one, its routes the whole system's: what each app may send
    the other is ``BusApp.external_endpoint``'s concern, not the cleanup's."""
    messages: int = 1
    partitions: int = 2
    """Message n goes to partition k{n % partitions}: with one partition, every message
    updates the same state (concurrent state updates)."""
    copies: int = 2
    """Copies of each initial signal queued at once (duplicate delivery)."""
    client_sends: int = 0
    """0: the initial messages are sent before the run, unscheduled. n >= 1: each is sent by
    n scheduled client sends with one idempotency key (2: a client's retry racing its
    original), faults included, and a client whose sends all ended without a receipt sends
    again (the client's contract: retry until a receipt), up to ``client_retries`` times."""
    client_retries: int = 5
    key_scopes: bool = False
    """BUS_INGRESS_KEY_SCOPES on (``shared.bus.ingress``): the clients' records at
    ``scope|key``; off, the default, at the raw key as the previous version keeps them."""
    shared_key: bool = False
    legacy_record: bool = False
    """With ``client_sends``: before the run the previous version sent message 0 (its
    ingress record under the raw key, without scope or fingerprint; the token's origin names
    it) and stopped before its signal, so the scheduled sends, the client's retries after
    the upgrade, must find that record and send its signal (``shared.bus.ingress``)."""
    """With ``client_sends``: every message is sent under one idempotency key, each by a
    client of its own sender scope (two senders that chose the same key, issue 34). Each is a
    message of its own: none may answer for, or pre-empt, another."""
    waits: int = 0
    """How often time may pass beyond the grace period while nothing runs and a message is
    hidden (a redelivery delayed by a backlog, a long lease or a poison replay), with a
    cleanup pass at its end. Within the timing assumptions, and not counted as a deviation
    (``Chooser`` kind ``time``)."""
    concurrency: int = 2
    """Function invocations that may run at the same time."""
    faults: tuple[Fault, ...] = (*ALL_FAULTS, Fault.LATE)
    """Fault kinds that may be injected (LATE only at writes)."""
    sweeps: int = 0
    """Cleanup passes that may start while messages are being processed."""
    duplicates: int = 0
    """Extra copies of queued signals the network may deliver during the run."""
    sweep_grace: float = 100.0
    """The cleanup's grace period; above invocation_limit + late_limit, as in production."""
    timing: Timing = "bounded"
    lease: float = 30.0
    """Queue visibility while an invocation runs; time passes in steps of lease + 1 s."""
    invocation_limit: float = 62.0
    """Bounded timing: no invocation runs longer (the function timeout)."""
    late_limit: float = 31.0
    """Bounded timing: a late request lands within this long of being sent."""
    max_ticks: int = 40
    max_steps: int = 4000
    max_dequeue_count: int = 10
    window: float = 3600.0
    """Window modes: how long a dedup record is kept (every mode's retention setting). Under
    bounded timing it must outlast the longest run (max_ticks ticks and the final grace)."""
    delay: float = 0.0
    """The first endpoint's Step is a delayed message, due this many seconds after its cause
    was processed (NoEarlyDelivery checks none is processed before then)."""
    failures: int = 0
    """The second endpoint's Step handler fails this many times per message."""
    retry: RetryPolicy | None = None
    """The second endpoint's retry policy (None: the host's retries)."""
    oversized: int = 0
    """The second endpoint's Step handler then grows its state over a table property this
    many times per message: a permanent failure, parked on that try whatever the policy.
    Once the run is quiet the operator replays what is parked (the cause fixed), as often
    as this many times: NoLostMessages then holds as in any run."""
    parked: bool = False
    """The parked phase (``lab.sim.parked.ParkedWorld``): the messages start parked, by the
    bus and by the Functions host, and an operator's replay and discard run beside the
    cleanup's poison task."""
    at_most_once: bool = False
    """The effect shape's service honours no idempotency key and is declared at-most-once
    (``docs/effects.md``, section 5): EffectsAppliedAtMostOnce judges its effects."""
    rolling: bool = False
    """A rolling deploy: the second endpoint is served by two versions of the app at once,
    the new one and an old one whose app does not know Step (``model.Version``); an
    invocation on its queue runs either (the old one is never the default choice). The old
    one gives back what it cannot read (``shared.bus.giveback``), within its give-back
    window (``World.old_window``)."""
    body_budget: int = 0
    """The bus's body budget in bytes (0: its default, which these small bodies never fill).
    A small one makes overlapping invocations postpone their messages (``shared.bus.budget``):
    each sends its signal again, hidden, and acknowledges its copy."""
    state_outage: int = 0
    """The app's state store does not answer for a span of the run: its first this many
    requests (to an endpoint's table) fail as a timeout does, before they are applied, and
    any fault the schedule chose there comes first. Counted in requests, not time: each
    delivery in the span reads its state first and finds it silent, so the message waits
    (``StateUnreachable``, ``shared.bus.failures``). With ``max_dequeue_count`` below it, a
    message that spent a try on each would be parked (NoLostMessages)."""
    claim_by_delete: ClaimByDelete | None = None
    """Token mode claims by the token's conditional delete instead of its metadata, by these
    rules (``lab.sim.claim_by_delete``, issue 33): a protocol explored beside production's."""
    session: bool = False
    """The session phase (``lab.sim.sessions.SessionWorld``): the scheduled client sends are
    web requests, each committing a row of its own and the messages it sends through a
    transactional session of the first endpoint (``shared.bus.session``), under its
    idempotency key; the others are token-mode receivers."""
    saga: bool = False
    """The saga phase (``lab.sim.sagas.SagaWorld``): the first endpoint is a saga whose
    instance starts, takes a reply, completes and then meets a second starting message; the
    client's second message is for an instance nobody starts."""
    cancel: bool = False
    """The cancel phase (``lab.sim.cancels.CancelWorld``, with ``saga``): scheduled messages
    (a saga's timeout, a handler's delayed send, a client's delayed send) race their cancels
    (the saga's completion, ``ctx.cancel``, the client's cancel by key)."""
    session_rollbacks: int = 0
    """The session phase: this many of the last requests fail inside their session's block
    (the request raises after its writes and sends), so it rolls back and sends nothing."""
    session_resend: float = 30.0
    """The session phase: ``BUS_SESSION_RESEND_SECONDS`` of the cleanup's sessions task, below
    one tick, so that a pass after one tick may signal a session its request still signals."""
    stall_outlasts_audit: bool = True
    wait_outlasts_audit: bool = False
    """``waits``: the time that passes also outlasts the audit retention (the audit rows are
    removed), as a poison replay days later or a long backlog does. Every mode inserts the
    audit row in its commit: while it is there a second commit of the message fails, so a
    protocol that leans on it leans on the audit retention, a time window."""
    """Unbounded timing: a stall also outlasts the audit retention (the audit rows are
    removed while it lasts). Every mode inserts the audit row in its commit, so while the
    row is there a second commit of the message fails whatever else expired."""

    def __post_init__(self) -> None:
        if self.state_outage and (self.store != "table" or self.apps != 1):
            raise ConfigurationError("state_outage is of one app's tables: store='table', apps=1")
        if self.apps not in (1, 2) or (self.apps == 2 and self.store != "table"):
            raise ConfigurationError("apps is 1, or 2 with store='table' (B's rows are in SQL)")
        if min(self.messages, self.copies, self.concurrency, self.partitions) < 1:
            raise ConfigurationError(
                "messages, partitions, copies and concurrency must be at least 1"
            )
        if self.client_sends and self.copies != 1:
            raise ConfigurationError("scheduled client sends queue no extra copies: copies=1")
        if self.session and (not self.client_sends or self.apps != 1):
            raise ConfigurationError("the session phase's requests are client sends: client_sends")
        if self.saga and (self.client_sends or self.apps != 1 or self.mode != "token"):
            raise ConfigurationError(
                "the saga phase is one app in token mode whose client sends come before the run"
            )
        if self.cancel and not self.saga:
            raise ConfigurationError("the cancel phase's app is a saga's: saga=True")
        if (self.shared_key or self.legacy_record) and not self.client_sends:
            raise ConfigurationError(
                "shared_key and legacy_record are about scheduled client sends: client_sends"
            )
        if (self.shared_key or self.legacy_record) and not self.key_scopes:
            raise ConfigurationError(
                "shared_key and legacy_record are about scoped keys: key_scopes=True"
            )
        if self.lease <= 0 or self.sweep_grace < 0:
            raise ConfigurationError("lease must be positive and sweep_grace not negative")
        longest = self.max_ticks * self.tick + self.sweep_grace + 1
        if self.windowed and self.timing == "bounded" and self.window <= longest:
            raise ConfigurationError(
                f"the dedup window ({self.window:.0f}s) must outlast the longest bounded run "
                f"({longest:.0f}s): copies past the window are outside what mode {self.mode} "
                "promises"
            )

    @property
    def windowed(self) -> bool:
        """Whether some endpoint's dedup records expire after ``window``."""
        return bool({self.mode, self.receivers} & set(WINDOW_MODES))

    @property
    def receivers(self) -> Mode:
        """The mode of every endpoint but the first."""
        return self.mode if self.receiver_mode is None else self.receiver_mode

    @property
    def tick(self) -> float:
        return self.lease + 1

    @property
    def residue_checked(self) -> bool:
        """Residue is bounded when the timing assumptions hold and either no cleanup runs
        before the run is quiet or the grace period outlasts any invocation plus any late
        request (design notes 3)."""
        return self.timing == "bounded" and (
            self.sweeps == 0 or self.sweep_grace > self.invocation_limit + self.late_limit
        )


@dataclass
class RunResult:
    config: SimConfig
    decisions: list[int]
    trace: list[str]
    violations: list[Violation]
    faults: int
    observation: Observation
    fingerprint: int = 0
    """The run's trace up to the order of independent events (``TraceFingerprint``)."""
    pruned: bool = False
    """Cut short by ``World.covered``: an equivalent run was already explored. Nothing is
    checked; the fields describe the part that ran."""

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class Action:
    kind: Literal[
        "step", "start", "land", "tick", "sweep", "duplicate", "send", "operator", "cancel"
    ]
    weight: float
    process: Process | None = None
    queue: str = ""
    held: HeldRequest | None = None
    version: Version = "new"
    """For a start: the version of the app the invocation runs (``SimConfig.rolling``)."""


TICK = Action("tick", 0.3)
SWEEP = Action("sweep", 0.2)
APPS = ("A", "B")
"""The apps of a system of two (``SimConfig.apps``)."""
SWEEPS = {app: Action("sweep", 0.2, queue=app) for app in APPS}
"""A cleanup pass of one app of a system of two (the action's ``queue`` names the app)."""

AccountWrapper = Callable[[StorageAccount], StorageAccount]


class CounterIds:
    """Claim and attempt ids from a counter per simulated process (one more for calls outside
    any process), so that a run's ids replay exactly and an id depends only on its process's
    own history, not on how the other processes' steps interleave with it: two equivalent
    schedules (``TraceFingerprint``) then name everything alike. Production ids are random,
    so nothing may depend on their order anyway."""

    def __init__(self, drawn: dict[int, int] | None = None) -> None:
        self.drawn = dict(drawn or {})
        """Owner (0: outside any process, else the process number + 1) -> ids drawn."""

    def __call__(self) -> str:
        process = Scheduler.current()
        owner = 0 if process is None else process.number + 1
        self.drawn[owner] = self.drawn.get(owner, 0) + 1
        return str(uuid.UUID(int=owner << 64 | self.drawn[owner]))


@dataclass(frozen=True)
class Prepared:
    """What ``World.setup`` leaves behind besides the account's contents: the ids it drew
    and the state of the bus's jitter. A world given it (``World.prepared``) starts where a
    world of the same configuration was after its setup, on a copy of that world's account
    (``explore.simulate``)."""

    ids: dict[int, int]
    jitter: tuple[Any, ...]
    documents: MemoryDocumentDatabase | None = None
    """The Cosmos DB model as setup left it (``store="cosmos"``): each world works on a copy,
    as it does on a copy of the account."""


async def _queue_state(queue: MessageQueue) -> tuple[bool, bool]:
    """(has a visible message, has a hidden one)."""
    count = await queue.approximate_count()
    if count == 0:  # the count is never below the number of messages: none to peek at
        return False, False
    visible = len(await queue.peek(32))
    return visible > 0, count > visible


async def _no_sleep(seconds: float) -> None:
    """Backoff between conflict rounds: time the simulation does not need to spend, since the
    other processes only move when the scheduler lets them."""


def describe(operation: Operation) -> str:
    target = operation.target
    return f"{operation.kind} {target if len(target) <= 60 else target[:57] + '...'}"


@dataclass
class World:
    config: SimConfig
    chooser: Chooser
    account: StorageAccount
    """The store the run uses (in-memory, or a real account for the Azurite matrix)."""
    clock: ManualClock | None
    """The manual clock of in-memory stores; None for real stores (time passes for real)."""
    suffix: str = ""
    wrap: AccountWrapper | None = None
    """Wraps the instrumented account the bus uses: how pipeline variants change behaviour."""
    retention: float | None = None
    """The retention the cleanup is configured with, if not the dedup window (a variant)."""
    covered: Callable[[Hashable], bool] | None = None
    """Asked before every action with the run's state (``decision_state``): True ends the
    run at once, its continuations being equivalent to runs already explored."""
    old_version: Version = "old"
    """What the old instances of the rolling phase run (a variant may make them misread)."""
    old_window: float | None = None
    """Their give-back window (BUS_GIVE_BACK_SECONDS), if not the default (a variant)."""
    prepared: Prepared | None = None
    """Set when ``account`` already holds what ``setup`` puts there for this configuration
    (a copy of an account another world set up): ``run`` then skips ``setup``."""
    attempt_keys: bool = False
    """The effect shape's provider gets a key of its own on every call (a variant)."""
    effect_before_commit: bool = False
    """The effect shape's handler calls the provider before its round commits (a variant)."""
    answer_outside: bool = False
    """The effect shape's performer sends each answer itself, outside its commit (a variant)."""
    amo_retried: bool = False
    """The effect shape's at-most-once service is declared idempotent: called again after an
    unknown outcome, without a marker (a variant)."""
    foreign_origins_own: bool = False
    """A system of two apps: each app's cleanup takes the other app's endpoints for its own,
    looking their rows up in its own state store, where they are not (a variant)."""
    session_class: type[Session] = Session
    """The session phase: the transactional session the requests open (a variant's)."""
    session_task: Callable[[str], CleanupTask] = SessionRecords
    """The session phase: the cleanup's sessions task (a variant's)."""
    receiver_class: type[Receiver] | None = None
    """The saga phase: the saga endpoint's receiver, if not production's (a variant's)."""
    canceller_class: type[Canceller] | None = None
    """The cancel phase: the client's canceller, if not production's (a variant's)."""
    documents_wrap: DocumentsWrapper | None = None
    """Changes every endpoint's documents in the Cosmos DB model (a variant's store)."""
    trace: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        config = self.config
        self.instrumentation = Instrumentation(plan=self._plan)
        self.provider = ScheduledProvider(
            self.instrumentation,
            self.account,
            f"{ENDPOINTS[0]}{self.suffix}",
            attempt_keys=self.attempt_keys,
            provider=InMemoryProvider(honours_keys=not config.at_most_once),
        )
        self.scheduler = Scheduler(None if self.clock is not None else REAL_STORE_TIMEOUT)
        self.instrumentation.on_operation = self.scheduler.gate
        instrumented: StorageAccount = PayloadReads(
            InstrumentedAccount(self.account, self.instrumentation), f"payloads{self.suffix}"
        )
        if self.wrap is not None:
            instrumented = self.wrap(instrumented)
        self.instrumented = instrumented
        self.sim = self._build_app(instrumented)
        self.sql = self._sql_database()
        self.documents = self._document_database()
        self.counted_documents = (
            None
            if self.documents is None
            else SimulatedDocumentDatabase(
                self.documents, self.instrumentation, self.documents_wrap
            )
        )
        declared = self.sim.app.endpoints
        for number, (name, endpoint) in enumerate(declared.items()):
            if config.apps == 2 and number > 0:
                declared[name] = replace(endpoint, store="postgres")
            elif config.store != "table":
                declared[name] = replace(endpoint, store=config.store)
        self.endpoints = list(self.sim.app.endpoints)
        self.app_of = {
            name: APPS[config.apps == 2 and number > 0] for number, name in enumerate(declared)
        }
        """Each endpoint's app: all ``A``'s, or in a system of two the first's alone."""
        self.modes = {name: e.mode for name, e in self.sim.app.endpoints.items()}
        self.quiet_account = self.account if self.wrap is None else self.wrap(self.account)
        """For the cleanup passes run while nothing else runs: neither scheduled nor faulted,
        but changed by a variant like every other pass."""
        self.ids = CounterIds(None if self.prepared is None else self.prepared.ids)
        jitter = random.Random(0)
        if self.prepared is not None:
            jitter.setstate(self.prepared.jitter)
        settings: dict[str, Any] = {
            "tokens_container": f"tokens{self.suffix}",
            "payloads_container": f"payloads{self.suffix}",
            "topics_container": f"topics{self.suffix}",
            "ingress_table": f"ingress{self.suffix}",
            "topic_cache_seconds": 0.0,
            "sleep": _no_sleep,
            "new_id": self.ids,
            "jitter": jitter,
            "processed_retention_seconds": config.window,
            "state_stream_retention_seconds": config.window,
            "entity_outbox_retention_seconds": config.window,
            "ingress_key_scopes": config.key_scopes,
            # The scheduler decides one storage operation of a process at a time: one token
            # create or signal send in flight, in the deliveries' order, as before the limit.
            "send_concurrency": 1,
            # The simulator's time is its own: a receiver that finds no room in the body
            # budget postpones its message at once instead of waiting for it.
            "body_budget_bytes": config.body_budget,
            "body_budget_wait_seconds": 0.0,
        }
        if self.clock is not None:
            settings["clock"] = self.clock  # one clock for the stores and the bus
        self.bus_config = BusConfig(**settings)
        self.counted_sql = (
            None if self.sql is None else InstrumentedSql(self.sql, self.instrumentation)
        )
        self.watch = PayloadWatch(instrumented, self.account, self.bus_config.payloads_container)
        """The bus's account, watching for a payload missing while its token exists."""
        self.kept_envelopes: KeptEnvelopes = {}
        self.bus = self._bus()
        queue_settings = QueueSettings(
            max_dequeue_count=config.max_dequeue_count, lease_seconds=config.lease
        )
        self.workers = {
            name: QueueWorker(instrumented, name, self._handler(name), queue_settings)
            for name in self.endpoints
        }
        self.old_workers = self._old_instances(queue_settings)
        self._planned: dict[int, Fault] = {}
        self._outage_left = config.state_outage
        """Requests of the state store's outage still to fail (``SimConfig.state_outage``)."""
        self._held_at: dict[int, float] = {}
        self._held_by: dict[int, tuple[str, int]] = {}
        """Operation index of a held request -> (process, its operation number there)."""
        self.fingerprint = TraceFingerprint()
        self._current: Process | None = None
        self._queues: dict[str, tuple[bool, bool]] = {}
        """What ``_queue_state`` last read of each endpoint queue, while it holds."""
        self._endpoint_queues = {name: self.account.queue(name) for name in self.endpoints}
        # Actions are immutable: each is made once and listed again at every decision.
        self._starts = {name: Action("start", 1.0, queue=name) for name in self.endpoints}
        self._old_starts = {
            name: Action("start", 1.0, queue=name, version=self.old_version)
            for name in self.old_workers
        }
        self._duplicates = {name: Action("duplicate", 0.2, queue=name) for name in self.endpoints}
        self._steps: dict[int, Action] = {}
        self._fault_kinds: dict[str, tuple[list[Fault | Stall | None], list[float]]] = {}
        self._lands: dict[int, Action] = {}
        self.ticks = self.sweeps_started = self.duplicates_sent = self.faults = self.waited = 0
        self.replays = 0
        self._answers_sent = 0
        self.sends_left = dict.fromkeys(range(config.messages), config.client_sends)
        self.retries_left = dict.fromkeys(range(config.messages), config.client_retries)
        self.receipts: set[int] = set()
        self.client = self.bus.client(CLIENT)
        self.past_window = False
        """A stalled process woke up after the dedup window (window modes only)."""
        self.copy_reads: list[str] = []
        """Payload reads by copies that ran no handler (NoPayloadReadByCopies)."""

    def _bus(self) -> Bus:
        """The bus the invocations run: production's, or one whose token mode claims by
        delete (``SimConfig.claim_by_delete``)."""
        protocol = self.config.claim_by_delete
        if protocol is None:
            return Bus(
                self.sim.app,
                self.watch,
                self.bus_config,
                sql=self.counted_sql,
                cosmos=self.counted_documents,
            )
        return ClaimByDeleteBus(
            self.sim.app,
            self.watch,
            self.bus_config,
            sql=self.counted_sql,
            protocol=protocol,
            kept=self.kept_envelopes,
        )

    def _build_app(self, instrumented: StorageAccount) -> SimApp:
        """The app the run drives: the model's (``lab.sim.model``) for the configuration."""
        config = self.config
        return build_app(
            config.shape,
            config.mode,
            self.suffix,
            receiver_mode=config.receivers,
            delay=config.delay,
            failures=config.failures,
            retry=config.retry,
            oversized=config.oversized,
            provider=self.provider if config.shape == "effect" else None,
            effect_before_commit=self.effect_before_commit,
            answer_outside=self._send_answer if self.answer_outside else None,
            at_most_once=self._at_most_once(instrumented),
        )

    def _sql_database(self) -> MemorySqlDatabase | None:
        """The in-memory model of PostgreSQL the endpoints' rows are kept in, if any."""
        wanted = self.config.store == "postgres" or self.config.apps == 2
        return MemorySqlDatabase() if wanted else None

    def _document_database(self) -> MemoryDocumentDatabase | None:
        """The in-memory model of Cosmos DB the endpoints' documents are kept in, if any: a
        copy of the one setup left (``Prepared``), or a new one."""
        if self.config.store != "cosmos":
            return None
        if self.prepared is not None and self.prepared.documents is not None:
            return self.prepared.documents.copy()
        return MemoryDocumentDatabase()

    # -- the bus as the Functions host would run it ------------------------------------------

    async def _send_answer(self, answer: Command, to: str) -> None:
        """The ``answer-outside-outbox`` variant's send: a client's, under a key of its own on
        every run, as a performer that sends its answer itself would."""
        self._answers_sent += 1
        key = f"answer{self._answers_sent}"
        await self.bus.client(PERFORMER_ENDPOINT).send(answer, to=to, idempotency_key=key)

    def _handler(self, endpoint: str, bus: Bus | None = None) -> Callable[[str, int], Any]:
        receiving = bus or self.bus

        async def handle(raw: str, dequeue_count: int) -> None:
            outcome = await receiving.receive(endpoint, raw, dequeue_count)
            record = invocation.current.get()
            if record is not None:
                record.outcome = outcome

        return handle

    def _old_instances(self, queue_settings: QueueSettings) -> dict[str, QueueWorker]:
        """The rolling phase's old instance of the second endpoint: the old app's bus over the
        same account, stores and queue (``SimConfig.rolling``); none otherwise."""
        if not self.config.rolling:
            return {}
        config = self.config
        old = build_app(
            config.shape,
            config.mode,
            self.suffix,
            receiver_mode=config.receivers,
            version=self.old_version,
        )
        settings = self.bus_config
        if self.old_window is not None:
            settings = replace(settings, give_back_seconds=self.old_window)
        bus = Bus(
            old.app, self.watch, settings, sql=self.counted_sql, cosmos=self.counted_documents
        )
        second = self.endpoints[1]
        worker = QueueWorker(self.instrumented, second, self._handler(second, bus), queue_settings)
        return {second: worker}

    def now(self) -> float:
        return self.bus_config.clock()

    async def setup(self) -> None:
        blob = tuple(self.endpoints) if self.config.store == "blob" else ()
        await provision(
            self.account,
            resources_of(self.bus_config, tuple(self.endpoints), blob_endpoints=blob),
        )
        setup_bus = Bus(
            self.sim.app, self.account, self.bus_config, sql=self.sql, cosmos=self.documents
        )
        await setup_bus.subscribe_all()
        if self.config.legacy_record:
            await self._previous_version_sent(setup_bus)
        if self.config.client_sends:
            return  # the client sends are scheduled processes
        client = setup_bus.client(CLIENT)
        for number in range(self.config.messages):
            await self._send_initial(client, number)
        for endpoint in self.endpoints:
            queue = self.account.queue(endpoint)
            for signal in await queue.peek(32):
                for _ in range(self.config.copies - 1):
                    await queue.send(signal.content)

    async def _previous_version_sent(self, bus: Bus) -> None:
        """Message 0 as the previous version left it when it stopped between its record's
        commit and its signal: the record under the raw key, the token's origin naming it."""
        await bus.client(CLIENT).send(self._start(0), to=self.sim.entry, idempotency_key="m0")
        table = self.account.table(self.bus_config.ingress_table)
        scoped = await table.get(record_key(CLIENT, "m0"), INGRESS_ROW)
        signals = decode_signals(str(scoped["outgoing"]))
        old = {k: v for k, v in scoped.properties.items() if k not in SCOPED_FIELDS}
        old["outgoing"] = first_format(signals)  # the only format the previous version wrote
        await table.insert(Entity("m0", INGRESS_ROW, old))
        await table.delete(scoped.partition_key, INGRESS_ROW)
        tokens = self.account.blob_container(self.bus_config.tokens_container)
        origin = Origin(table.name, "m0", INGRESS_ROW).encode()
        for token in (signal.token for signal in signals):
            metadata = (await tokens.get_properties(token)).metadata
            await tokens.set_metadata(token, {**metadata, ORIGIN_METADATA: origin})
        await self.account.queue(self.sim.entry).clear()

    async def _send_initial(self, client: IngressClient, number: int) -> None:
        """The client sends initial message ``number`` before the run."""
        message, to = self._initial(number)
        await client.submit(message, to=to, idempotency_key=f"m{number}")

    def after_setup(self) -> Prepared:
        """What ``setup`` left behind besides the account (call it right after ``setup``)."""
        return Prepared(dict(self.ids.drawn), self.bus_config.jitter.getstate(), self.documents)

    def _initial(self, number: int) -> tuple[Message, str | None]:
        """Initial message ``number`` and where the client sends it (None: published)."""
        return self._start(number), self.sim.entry

    def _start(self, number: int) -> Start:
        return Start(key=f"k{number % self.config.partitions}", request=f"m{number}")

    # -- faults --------------------------------------------------------------------------------

    def _plan(self, operation: Operation) -> Fault | None:
        planned = self._planned.pop(operation.index, None)
        if planned is None and self._outage_left and self._to_state_store(operation):
            self._outage_left -= 1
            return Fault.ERROR_BEFORE
        return planned

    def _to_state_store(self, operation: Operation) -> bool:
        """Whether ``operation`` is a request to an endpoint's table: the app's state store."""
        table = operation.target.split("/")[0]
        return operation.kind.startswith("table.") and table in self.app_of

    def _fault_options(
        self, operation: Operation
    ) -> tuple[list[Fault | Stall | None], list[float]]:
        """The faults ``operation`` may be given, no fault first, and their weights (the same
        for every operation of a kind: kept per kind)."""
        options = self._fault_kinds.get(operation.kind)
        if options is None:
            faults = self._faults_of(operation.kind)
            options = self._fault_kinds[operation.kind] = (faults, [1.0] * len(faults))
        return options

    def _faults_of(self, kind: str) -> list[Fault | Stall | None]:
        allowed: tuple[Fault, ...] = self.config.faults
        if kind in READS:
            before = (Fault.CRASH_BEFORE, Fault.ERROR_BEFORE)
            allowed = tuple(f for f in allowed if f in before)
        elif Fault.LATE in allowed and kind == "queue.receive":
            # A late receive only hides a message once more: the same as a crash after it.
            allowed = tuple(f for f in allowed if f is not Fault.LATE)
        if self.config.timing == "unbounded":
            return [None, *allowed, STALL]
        return [None, *allowed]

    # -- actions -------------------------------------------------------------------------------

    async def _queue_state(self) -> dict[str, tuple[bool, bool]]:
        """Per endpoint queue, in the endpoints' order: (has a visible message, has a hidden
        one). Only operations on that queue, late requests, duplicates and time change it, so
        it is read again only after those."""
        known = self._queues
        if len(known) < len(self._endpoint_queues):
            self._queues = {}
            for name, queue in self._endpoint_queues.items():
                state = known.get(name)
                self._queues[name] = await _queue_state(queue) if state is None else state
        return self._queues

    def _tick_allowed(self, live: list[Process], unlanded: list[HeldRequest]) -> bool:
        if self.ticks >= self.config.max_ticks:
            return False
        if self.config.timing == "unbounded":
            return True
        later = self.now() + self.config.tick
        if any(later - p.started_at > self.config.invocation_limit for p in live):
            return False
        return all(
            later - self._held_at[h.operation.index] <= self.config.late_limit for h in unlanded
        )

    def _unlanded(self) -> list[HeldRequest]:
        return [h for h in self.instrumentation.held if not h.landed]

    async def enabled(self) -> list[Action]:
        """Every action possible now, the default (keep running the current process) first."""
        actions: list[Action] = []
        live = self.scheduler.live()
        current = self._current
        if current is not None and current.runnable:
            actions.append(self._step_action(current))
        invocations, sweeping = 0, set()
        for process in live:
            if process.runnable and process is not current:
                actions.append(self._step_action(process))
            if process.name.startswith("inv"):
                invocations += 1
            elif process.name.startswith("sweep"):
                sweeping.add(process.name.removeprefix("sweep")[:1])
        if self.config.client_sends:
            actions += self._client_sends(live)
        queues = self._queues
        if len(queues) < len(self._endpoint_queues):  # one was changed since it was read
            queues = await self._queue_state()
        if invocations < self.config.concurrency:
            actions += [self._starts[name] for name, (visible, _) in queues.items() if visible]
            actions += [a for name, a in self._old_starts.items() if queues[name][0]]
        unlanded = self._unlanded()
        actions += [self._land_action(h) for h in unlanded]
        duplicates = []
        if self.duplicates_sent < self.config.duplicates:
            duplicates = [
                self._duplicates[name] for name, (visible, _) in queues.items() if visible
            ]
        hidden = any(h for _, h in queues.values())
        # A tick alone is not progress: only when it may bring a hidden message back.
        if not hidden and not actions and not duplicates:
            return []
        sweeps_left = self.sweeps_started < self.config.sweeps
        if (hidden or sweeps_left) and self._tick_allowed(live, unlanded):
            actions.append(TICK)
        if sweeps_left and self.config.apps == 1 and not sweeping:
            actions.append(SWEEP)
        elif sweeps_left and self.config.apps == 2:
            actions += [SWEEPS[app] for app in APPS if app not in sweeping]
        return actions + duplicates

    def _step_action(self, process: Process) -> Action:
        action = self._steps.get(process.number)
        if action is None:
            action = self._steps[process.number] = Action("step", 1.0, process=process)
        return action

    def _land_action(self, held: HeldRequest) -> Action:
        action = self._lands.get(held.operation.index)
        if action is None:
            action = self._lands[held.operation.index] = Action("land", 0.5, held=held)
        return action

    def _client_sends(self, live: list[Process]) -> list[Action]:
        """A client send of each key that still has one to make, or a retry of a key whose
        sends all ended without a receipt."""
        sending = {p.name.partition("@")[2] for p in live if p.name.startswith(CLIENT)}
        actions = []
        for number, left in self.sends_left.items():
            key = f"m{number}"
            retry = (
                number not in self.receipts and key not in sending and self.retries_left[number] > 0
            )
            if left > 0 or retry:
                actions.append(Action("send", 1.0, queue=key))
        return actions

    async def _wait_allowed(self) -> bool:
        """Time may jump past the grace period only while nothing runs or is held (bounded
        timing holds) and a message is hidden (its redelivery is what is delayed)."""
        if self.waited >= self.config.waits or self.scheduler.live() or self._unlanded():
            return False
        return any(hidden for _, hidden in (await self._queue_state()).values())

    async def _wait(self) -> None:
        """The cleanup runs on a schedule (every few minutes), so a redelivery that comes
        after the grace period comes after a cleanup pass too."""
        await self._advance(self.config.sweep_grace + 1)
        await self._cleanup(self.quiet_account, self.config.sweep_grace, self.config.window)
        if self.config.wait_outlasts_audit:
            await expire_audit_rows(self._endpoint_rows(self.account).values())
        self.waited += 1
        self._queues = {}
        self.fingerprint.barrier("wait")
        audit = " and the audit retention" if self.config.wait_outlasts_audit else ""
        self.trace.append(
            f"{len(self.trace):4} time passes beyond the grace period{audit} (the redelivery "
            "is late); a cleanup pass runs"
        )

    async def _when_quiet(self) -> bool:
        """The run is quiet: what the world does before it ends (True: the run goes on)."""
        return await self._replay_parked()

    async def _replay_parked(self) -> bool:
        """With ``SimConfig.oversized``: the run is quiet and messages are parked; the
        operator replays them (``bus replay``), as often as the configuration allows.
        False when there is nothing to replay."""
        if self.replays >= self.config.oversized:
            return False
        replayed = 0
        for endpoint in self.endpoints:
            replayed += await replay(
                self.quiet_account, endpoint, container=self.bus_config.parked_container
            )
        if not replayed:
            return False
        self.replays += 1
        self._queues = {}
        self.fingerprint.barrier("replay")
        self.trace.append(f"{len(self.trace):4} the operator replays {replayed} parked message(s)")
        return True

    async def perform(self, action: Action) -> None:
        number = len(self.trace)
        if action.kind == "step":
            # _actions gives every step its process
            await self._step(number, cast(Process, action.process))
            return
        self._queues = {}  # every other action may change what the queues hold
        if action.kind == "send":
            key = int(action.queue.removeprefix("m"))
            if self.sends_left[key] > 0:
                self.sends_left[key] -= 1
            else:
                self.retries_left[key] -= 1
            self._current = await self.scheduler.spawn(
                f"{CLIENT}{len(self.scheduler.processes)}@{action.queue}",
                lambda: self._client_send(key),
                self.now(),
            )
            self._spawned(number, self._current)
        elif action.kind == "start":
            old = "" if action.version == "new" else "(old)"
            self._current = await self.scheduler.spawn(
                f"inv{len(self.scheduler.processes)}@{action.queue}{old}",
                lambda: self._invocation(action.queue, action.version),
                self.now(),
            )
            self._spawned(number, self._current)
        elif action.kind == "land":
            held = cast(HeldRequest, action.held)  # _actions gives every land its request
            accepted = await held.land()
            sender, sent_as = self._held_by[held.operation.index]
            self.fingerprint.operation(
                f"late {sender}#{sent_as}",
                locations(held.operation.kind, held.operation.target, read=False),
                ("land", sender, sent_as, accepted),
            )
            self.trace.append(
                f"{number:4} late request lands: {describe(held.operation)}"
                + ("" if accepted else " (refused)")
            )
        elif action.kind == "tick":
            await self._advance(self.config.tick)
            self.ticks += 1
            self.fingerprint.barrier("tick")
            self.trace.append(f"{number:4} time passes {self.config.tick:.0f}s")
        elif action.kind == "sweep":
            self.sweeps_started += 1
            app = action.queue  # one app's pass in a system of two, else every endpoint's
            self._current = await self.scheduler.spawn(
                f"sweep{app}{len(self.scheduler.processes)}",
                functools.partial(self._sweep, app or None),
                self.now(),
            )
            self._spawned(number, self._current)
        else:
            [message] = await self.account.queue(action.queue).peek(1)
            await self.account.queue(action.queue).send(message.content)
            self.duplicates_sent += 1
            self.fingerprint.operation(
                "network", [(f"queue:{action.queue}", False)], ("duplicate", action.queue)
            )
            self.trace.append(f"{number:4} network duplicates a signal on {action.queue}")

    async def _step(self, number: int, process: Process) -> None:
        # Only runnable processes are stepped, and a runnable process has an operation pending.
        operation = cast(Operation, process.pending)
        if operation.kind.startswith("queue."):
            self._queues.pop(operation.target, None)  # the queue's name
        options, weights = self._fault_options(operation)
        fault = None
        if len(options) > 1:
            fault = options[self.chooser.choose("fault", weights)]
        if fault is not None:
            self.faults += 1
        if isinstance(fault, Stall):
            process.stalled = True
            self.fingerprint.local(process.name, ("stall", process.operations))
            self.trace.append(
                f"{number:4} {process.name}: stalls before {describe(operation)} for longer "
                "than the grace period"
            )
            return
        if fault is not None:
            self._planned[operation.index] = fault
        held_before = len(self.instrumentation.held)
        self.trace.append(
            f"{number:4} {process.name}: {describe(operation)}"
            + (f"  [{fault.value}]" if fault is not None else "")
        )
        self._current = process
        performed = process.operations
        self.fingerprint.operation(
            process.name,
            self._locations(process, operation),
            (process.name, performed, operation.kind, operation.target, fault),
        )
        await self.scheduler.step(process)
        if len(self.instrumentation.held) > held_before:
            for held in self.instrumentation.held[held_before:]:
                self._held_at[held.operation.index] = self.now()
                self._held_by[held.operation.index] = (process.name, performed)
        self._note_end(process)

    def _locations(self, process: Process, operation: Operation) -> list[tuple[str, bool]]:
        found = locations(operation.kind, operation.target, read=operation.kind in READS)
        if self.sql is not None and process.name.startswith("sweep"):
            # The cleanup pages through the SQL outbox without a scheduled operation, in
            # whichever of its steps comes before: order all its steps against SQL writes.
            found.append(("sql:outbox", False))
        elif (
            self.sql is not None
            and operation.kind.startswith("sql.")
            and operation.kind not in READS
        ):
            found.append(("sql:outbox", True))
        return found

    def _spawned(self, number: int, process: Process) -> None:
        self.trace.append(f"{number:4} start {process.name}")
        self.fingerprint.operation(process.name, [("spawns", False)], ("spawn", process.name))
        self._note_end(process)

    def _note_end(self, process: Process) -> None:
        if process.done:
            self.fingerprint.local(process.name, ("end", process.outcome))

    def _stalled(self) -> list[Process]:
        return [p for p in self.scheduler.live() if p.stalled]

    def _sql_rows(self, counted: bool) -> dict[str, EndpointState]:
        """Each endpoint's rows when they are not in its table: in SQL or in documents
        (counted: through the instrumentation)."""
        account = self.instrumented if counted else self.account
        sql = self.counted_sql if counted else self.sql
        documents = self.counted_documents if counted else self.documents
        return {
            e.name: endpoint_state(e.name, e.store, account, sql, documents)
            for e in self.sim.app.endpoints.values()
            if e.store != "table"
        }

    def _endpoint_rows(self, account: StorageAccount) -> dict[str, EndpointRows]:
        """Each endpoint's rows for a pass on ``account``, in the store it declares: its table
        there, its rows in SQL or its documents, counted when ``account`` is the instrumented
        one."""
        counted = account is self.instrumented
        sql = self.counted_sql if counted else self.sql
        documents = self.counted_documents if counted else self.documents
        return endpoints_rows(self.sim.app.endpoints.values(), account, sql, documents)

    async def _cleanup(
        self, account: StorageAccount, grace: float, window: float, app: str | None = None
    ) -> None:
        """A cleanup pass of every app in turn, or of ``app`` alone."""
        if self.config.apps == 1:
            await cleanup_to_completion(
                account,
                self.modes,
                self._endpoint_rows(account),
                tokens_container=self.bus_config.tokens_container,
                payloads_container=self.bus_config.payloads_container,
                ingress_table=self.bus_config.ingress_table,
                grace_seconds=grace,
                window_seconds=window if self.retention is None else self.retention,
                clock=self.bus_config.clock,
                senders=(CLIENT,),
                outbox_task=self._outbox_task(),
            )
            return
        for each in APPS if app is None else (app,):
            own = [name for name in self.endpoints if self.app_of[name] == each]
            if self.foreign_origins_own:
                own = list(self.endpoints)
            await cleanup_to_completion(
                account,
                {name: self.modes[name] for name in own},
                self._app_rows(account, each, own),
                tokens_container=self.bus_config.tokens_container,
                payloads_container=self.bus_config.payloads_container,
                ingress_table=self._ingress_table(each),
                grace_seconds=grace,
                window_seconds=window if self.retention is None else self.retention,
                clock=self.bus_config.clock,
                senders=(CLIENT,) if each == APPS[0] else (),
                whole_container=True,
            )

    def _ingress_table(self, app: str) -> str:
        """A's ingress table is the client's; B's, named after B, holds no record."""
        ingress = self.bus_config.ingress_table
        return ingress if app == APPS[0] else f"{app.lower()}{ingress}"

    def _app_rows(
        self, account: StorageAccount, app: str, endpoints: list[str]
    ) -> dict[str, EndpointRows]:
        """The rows of ``endpoints`` as ``app``'s cleanup is given them: each in its own store,
        or (``foreign_origins_own``) all in ``app``'s, where the other app's are not."""
        declared = self.sim.app.endpoints
        chosen = [declared[name] for name in endpoints]
        if self.foreign_origins_own:
            store: Store = "table" if app == APPS[0] else "postgres"
            chosen = [replace(endpoint, store=store) for endpoint in chosen]
        sql = self.counted_sql if account is self.instrumented else self.sql
        return endpoints_rows(chosen, account, sql)

    def _outbox_task(self) -> Callable[[str], CleanupTask] | None:
        """The cleanup's O(m) task when token mode claims by delete and keeps an uncommitted
        O(m); None: production's."""
        protocol = self.config.claim_by_delete
        if protocol is None or protocol.uncommitted == "retire":
            return None
        return ClaimedOutboxRecords

    async def _resume(self) -> None:
        """Everything else is quiet: the stalled processes wake up after more than the grace
        period, the dedup window of a window mode and (``stall_outlasts_audit``) the audit
        retention, during which a cleanup pass ran."""
        beyond = self.config.window if self.config.windowed else self.config.sweep_grace
        await self._advance(max(beyond, self.config.sweep_grace) + 1)
        await self._cleanup(self.quiet_account, self.config.sweep_grace, self.config.window)
        if self.config.stall_outlasts_audit:
            await expire_audit_rows(self._endpoint_rows(self.account).values())
        self.past_window = self.config.windowed
        self._queues = {}
        for process in self._stalled():
            process.stalled = False
        self.fingerprint.barrier("resume")
        passed = ["the grace period"]
        if self.config.windowed:
            passed.append("the dedup window")
        if self.config.stall_outlasts_audit:
            passed.append("the audit retention")
        spans = ", ".join(passed[:-1]) + " and " + passed[-1] if len(passed) > 1 else passed[0]
        self.trace.append(
            f"{len(self.trace):4} time passes beyond {spans}; a cleanup pass runs; "
            "stalled processes resume"
        )

    async def _advance(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    async def _invocation(self, queue_name: str, version: Version = "new") -> str:
        messages = await self.instrumented.queue(queue_name).receive(
            1, visibility_timeout=self.config.lease
        )
        if not messages:
            return "nothing to receive"
        [message] = messages
        # For a variant's wrapper and the payload watch (NoMissingPayload).
        with contextlib.suppress(MalformedSignal):
            token = Signal.parse(message.content).token
            incoming_token.set((self.bus_config.tokens_container, token))
        record = invocation.Invocation()
        invocation.current.set(record)
        workers = self.workers if version == "new" else self.old_workers
        acknowledged = await workers[queue_name].run_one(message)
        if record.copy_read_payload and record.outcome is not None:
            self.copy_reads.extend(
                f"a copy at {queue_name} ({record.outcome.value}) read payload {name} "
                "without running its handler"
                for name in record.payload_reads
            )
        return "acknowledged" if acknowledged else "released"

    async def _client_send(self, number: int) -> str:
        client, key = self.client, f"m{number}"
        if self.config.shared_key:  # one key, a sender scope per message
            client, key = self.bus.client(CLIENT, scope=f"{CLIENT}-{number}"), "m"
        receipt = await client.send(self._start(number), to=self.sim.entry, idempotency_key=key)
        self.receipts.add(number)
        return "deduplicated" if receipt.deduplicated else "sent"

    async def _sweep(self, app: str | None = None) -> str:
        await self._cleanup(self.instrumented, self.config.sweep_grace, self.config.window, app)
        return "swept"

    # -- the whole run -------------------------------------------------------------------------

    async def run(self, reference: Observation | None) -> RunResult:
        """Run to quiescence, clean up once, and check the invariants against ``reference``
        (None: this run is the reference)."""
        endpoint_modes.set(self.modes)  # for a variant's wrapper
        if self.prepared is None:
            await self.setup()
        try:
            stuck = await self._drive()
        finally:
            await self.scheduler.close()
        if stuck is None:
            return RunResult(
                self.config,
                list(self.chooser.decisions),
                self.trace,
                [],
                self.faults,
                Observation(mode=self.config.mode),
                self.fingerprint.digest(),
                pruned=True,
            )
        # Real stores keep real time: their final passes use no grace period and no window
        # instead of waiting for them (safe: nothing is in flight any more).
        manual = self.clock is not None
        grace = self.config.sweep_grace if manual else 0.0
        window = self.config.window if manual else 0.0
        await self._advance(grace + 1 if manual else 0)
        await self._cleanup(self.quiet_account, grace, window)
        seen = await self._observe()
        seen.within_window = not self.past_window
        if self.config.windowed:
            await self._advance(window + 1 if manual else 0)
            await self._cleanup(self.quiet_account, grace, window)
            seen.beyond = await self._observe()
        violations = list(stuck) + [
            Violation(UNEXPECTED_ERROR, f"{p.name} {p.outcome}")
            for p in self.scheduler.processes
            if p.outcome.startswith("raised")
        ]
        missing = dict.fromkeys(self.watch.missing)  # one per payload and token, in order
        violations += [Violation(NO_MISSING_PAYLOAD, m) for m in missing]
        copies = dict.fromkeys(self.copy_reads)
        violations += [Violation(NO_PAYLOAD_READ_BY_COPIES, c) for c in copies]
        if reference is not None:
            violations += await self._check(seen, reference)
        return RunResult(
            self.config,
            list(self.chooser.decisions),
            self.trace,
            violations,
            self.faults,
            seen,
            self.fingerprint.digest(),
        )

    async def _check(self, seen: Observation, reference: Observation) -> list[Violation]:
        """The invariants of a finished run against the fault-free one."""
        return check(seen, reference, client=CLIENT, residue=self.config.residue_checked)

    async def _observe(self) -> Observation:
        seen = await observe(
            self.account,
            self.endpoints,
            self.bus_config.tokens_container,
            self.config.mode,
            self._sql_rows(counted=False),
            payloads_container=self.bus_config.payloads_container,
            modes=self.modes,
        )
        if self.config.shape == "effect":
            seen.ledger = self.provider.ledger()
            seen.uncommitted = list(self.provider.uncommitted)
            seen.in_progress = self.provider.in_progress
            seen.at_most_once = self.config.at_most_once
        return seen

    def _at_most_once(self, instrumented: StorageAccount) -> AtMostOnce | None:
        """The performer's markers live in the bus's account: their inserts are scheduled and
        faulted like every other request, and changed by a variant's wrapper."""
        if not self.config.at_most_once:
            return None
        return AtMostOnce(performer_markers(instrumented), retried=self.amo_retried)

    def decision_state(self, actions: list[Action]) -> Hashable:
        """What decides the rest of a run from here: the trace so far up to the order of
        independent events, and the actions enabled now in the order the chooser sees them
        (the first is the default, so the current process is part of it). Two runs that meet
        the same decision state have the same continuations, up to the names of ETags, ids
        and receipts."""
        return (self.fingerprint.digest(), tuple(self._action_name(a) for a in actions))

    def _action_name(self, action: Action) -> Hashable:
        if action.process is not None:
            return (action.kind, action.process.name)
        if action.held is not None:
            return (action.kind, self._held_by[action.held.operation.index])
        return (action.kind, action.queue, action.version)

    async def _drive(self) -> list[Violation] | None:
        """The violations of a run that did not end, or None if ``covered`` cut it short."""
        for _ in range(self.config.max_steps):
            actions = await self.enabled()
            if self.covered is not None and self.covered(self.decision_state(actions)):
                return None
            waits_left = self.waited < self.config.waits  # most runs have none: skip the rest
            if (
                waits_left
                and await self._wait_allowed()
                and self.chooser.choose("time", [1.0, 0.3])
            ):
                await self._wait()
                continue
            if not actions and not self._stalled():
                if await self._when_quiet():
                    continue
                return []
            if not actions:
                await self._resume()
                continue
            choice = 0
            if len(actions) > 1:
                choice = self.chooser.choose("schedule", [a.weight for a in actions])
            await self.perform(actions[choice])
        return [
            Violation(
                NO_LOST_MESSAGES,
                f"the run did not become quiet within {self.config.max_steps} steps",
            )
        ]


async def reference_run(
    config: SimConfig,
    account: StorageAccount,
    clock: ManualClock | None,
    suffix: str = "",
    world_type: type[World] | None = None,
) -> Observation:
    """The same messages processed one at a time, once each, without faults (the session
    phase's requests: each sent once, ``world_type`` its world)."""
    plain = SimConfig(
        name=f"{config.name}-reference",
        shape=config.shape,
        mode=config.mode,
        receiver_mode=config.receiver_mode,
        messages=config.messages,
        partitions=config.partitions,
        copies=1,
        concurrency=1,
        faults=(),
        sweep_grace=config.sweep_grace,
        window=config.window,
        at_most_once=config.at_most_once,
        session=config.session,
        saga=config.saga,
        cancel=config.cancel,
        client_sends=1 if config.session else 0,
        session_rollbacks=config.session_rollbacks,
    )
    world = (world_type or World)(plain, Replay([]), account, clock, suffix)
    return (await world.run(None)).observation


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """The pipeline logs every injected failure; thousands of runs would drown the output.
    Inside a search already quiet, a run changes nothing (logging.disable empties every
    logger's cache, which costs more than a few steps of a run)."""
    previous = logging.root.manager.disable
    if previous >= logging.CRITICAL:
        yield
        return
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)
