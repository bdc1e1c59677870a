"""The invariants of design notes section 6, checked from the stores after a run.

A run is compared with its reference: the same configuration run once without faults,
duplicates or concurrency. The reference says which messages must exist (every output has a
deterministic id) and what each handler must have seen.

Every invariant means the same thing in every endpoint mode; what differs is where the
mode keeps the evidence (``lab.sim.readings``). The handler journal in the ``state`` row
and the ``audit|{m}`` rows are read in every mode; the window modes' dedup records
(``processed|{m}`` rows, the state-based ``version|{n}`` stream and ``msgidx|{m}`` index,
the entity-outbox map inside the ``state`` row) are read as well:

- NoDuplicatedProcessing: no message applied twice (its logical name once in the journal, so
  a client key sent twice as two messages counts too; state-based: in one version only).
  Window modes, while the run stays inside the dedup window: every applied message has its
  dedup record, exactly one, since without it the next copy would apply the message again.
- NoGhostMessages: nothing applied that the fault-free run does not send there, or whose
  cause was never applied.
- NoLostMessages: everything the fault-free run applies is applied, nothing is poisoned or
  left queued; no dedup record or audit row names a message the state never applied (every
  copy of it would be skipped).
- ConsistentOutput: each message's content and each audit row's outputs equal the
  fault-free run's; a window mode's record commits the same signals as the audit row says;
  state-based: the stream is the state's history (versions 1..n, one per applied message in
  journal order, the head at n holding the latest version's state, each index row pointing
  at its message's version, each version's output fingerprints equal to the fault-free
  run's).
- NoMissingPayload (``lab.sim.payloads``, checked as the run goes): no receiver finds a
  shared payload missing while the token it is processing exists.
- NoEarlyDelivery: no delayed message processed before its due time (the handler compares
  its processing time with the envelope's ``deliver_at``).
- NoMisreadMessages (the rolling phase, ``SimConfig.rolling``): no message processed by an old
  version of the app that cannot read it (its handler marks what it applies). That nothing is
  parked while an upgraded instance serves the queue is NoLostMessages (a parked message).
- EffectsAppliedOnce (the effect shape): every effect a committed round requested is in the
  provider's ledger once, under its key, and none before its round committed;
  EffectsAppliedAtMostOnce (the effect shape with ``SimConfig.at_most_once``): at most once,
  answered once, and ``succeeded`` only if applied.
- The parked phase (``lab.sim.parked``; ``check_parked``): NoLostParked, every parked
  message the operator did not discard is at the end still parked with its body readable, or
  replayed and applied (once: NoDuplicatedProcessing); NoExpiredEntry, no poison entry
  expired (the cleanup re-parks each before, given a pass at least once per margin);
  OriginalKept, no entry refers to a parked original that is gone (its replay would find
  nothing); BoundedParkedResidue, after quiescence and a cleanup pass no parked original is
  left that no entry refers to.
- BoundedResidue (checked when the timing assumptions hold, ``SimConfig.residue_checked``):
  after the cleanup pass that follows the quiet run by more than the grace period, no token
  and no shared payload is left in any mode and no O(m) in token mode. Token mode has no
  window, so that is all.
  The window modes legitimately keep one dedup record per message for their window, so for
  them time then moves past the window and one more cleanup pass (the same tasks) runs; after
  it no token is left and the dedup data is down to what ``ModeReading.beyond_window`` allows:
  no ``processed|`` row, no entry in any entity-outbox map, and of each state-based stream
  only the head version with its index row.
- The saga phase (``lab.sim.sagas``; ``check_sagas``), against the fault-free run's
  instances and audit outcomes: NoResurrectedInstance, an instance the fault-free run
  completed ends as its completed marker, started by the same message (not live again, not
  completed a second time, not gone: nothing retires a marker within a run);
  NoUnstartedInstance, no instance exists that no starting message started there;
  NoProcessingAfterCompletion, no message for a completed instance is processed (its audit
  row says ``processed``); SagaNotFoundOnce, every message the fault-free run acknowledged as
  ``saga_not_found`` has exactly one audit row, with that outcome, and no message it
  processed ends so. The saga's outputs are judged by ConsistentOutput as any handler's.
- The cancel phase (``lab.sim.cancels``; ``check_cancels``): CancelOrProcessedOnce, every
  scheduled message a cancel races (each the fault-free run sends) ends with exactly one
  audit row, saying ``cancelled``, or that it was processed (``processed``; a saga's timeout
  that found its instance completed: ``saga_not_found``), never both and never neither; none
  that an invocation processed ends ``cancelled``; each answer of the client's cancel agrees
  with its message's audit row (``cancelled`` with ``cancelled``, ``processed`` with a
  processed one); and no saga instance keeps a timeout pending that has ended, nor a
  completed one any. Where stalled processes woke after the audit retention (unbounded
  timing) a missing audit row is no violation, and an answer is judged by what the
  invocations processed alone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field

from lab.sim.model import Applied, Journal
from lab.sim.readings import WINDOW_MODES, ModeReading
from shared.bus.app import Mode
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.bus.poison import Unreadable, read_poison, unwrap
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW
from shared.bus.state.base import EndpointState
from shared.bus.state.rows import TableRows
from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.table import Entity

NO_DUPLICATED_PROCESSING = "NoDuplicatedProcessing"
NO_GHOST_MESSAGES = "NoGhostMessages"
NO_LOST_MESSAGES = "NoLostMessages"
CONSISTENT_OUTPUT = "ConsistentOutput"
BOUNDED_RESIDUE = "BoundedResidue"
NO_EARLY_DELIVERY = "NoEarlyDelivery"
NO_LOST_PARKED = "NoLostParked"
NO_EXPIRED_ENTRY = "NoExpiredEntry"
ORIGINAL_KEPT = "OriginalKept"
BOUNDED_PARKED_RESIDUE = "BoundedParkedResidue"
NO_MISSING_PAYLOAD = "NoMissingPayload"
NO_PAYLOAD_READ_BY_COPIES = "NoPayloadReadByCopies"
NO_MISREAD_MESSAGES = "NoMisreadMessages"
EFFECTS_APPLIED_ONCE = "EffectsAppliedOnce"
EFFECTS_AT_MOST_ONCE = "EffectsAppliedAtMostOnce"
NO_RESURRECTED_INSTANCE = "NoResurrectedInstance"
NO_UNSTARTED_INSTANCE = "NoUnstartedInstance"
NO_PROCESSING_AFTER_COMPLETION = "NoProcessingAfterCompletion"
SAGA_NOT_FOUND_ONCE = "SagaNotFoundOnce"
CANCEL_OR_PROCESSED_ONCE = "CancelOrProcessedOnce"
UNEXPECTED_ERROR = "UnexpectedError"
"""Not an invariant of the design: a simulated process raised something other than the
project's own errors, i.e. a bug in the code under test."""
NOT_FOUND = "saga_not_found"
CANCELLED = "cancelled"
PROCESSED = "processed"
"""The outcome of an audit row that names none (``AuditRecord.outcome``)."""
INVARIANTS = (
    NO_DUPLICATED_PROCESSING,
    NO_GHOST_MESSAGES,
    NO_LOST_MESSAGES,
    CONSISTENT_OUTPUT,
    BOUNDED_RESIDUE,
    NO_EARLY_DELIVERY,
    NO_LOST_PARKED,
    NO_EXPIRED_ENTRY,
    ORIGINAL_KEPT,
    BOUNDED_PARKED_RESIDUE,
    NO_MISSING_PAYLOAD,
    NO_PAYLOAD_READ_BY_COPIES,
    NO_MISREAD_MESSAGES,
    EFFECTS_APPLIED_ONCE,
    EFFECTS_AT_MOST_ONCE,
    NO_RESURRECTED_INSTANCE,
    NO_UNSTARTED_INSTANCE,
    NO_PROCESSING_AFTER_COMPLETION,
    SAGA_NOT_FOUND_ONCE,
    CANCEL_OR_PROCESSED_ONCE,
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass(frozen=True)
class Delivery:
    """One message a processed message caused, as its audit row says."""

    source: str
    cause: str
    message_id: str
    destination: str | None


@dataclass(frozen=True)
class Instance:
    """A saga instance's row at the end of a run (``lab.sim.sagas``)."""

    completed: bool
    started_by: str
    """The id of the message that started it (``SagaRow.started_by``)."""


@dataclass(frozen=True)
class Ended:
    """One audit row of a saga's message: its instance and its outcome (``processed`` for a
    row without one)."""

    partition: str
    outcome: str


@dataclass
class CancelEnd:
    """The audit rows of a message a cancel races (``lab.sim.cancels``)."""

    endpoint: str
    source: str
    outcomes: list[str] = field(default_factory=list)


@dataclass
class Observation:
    """What the stores hold once a run is quiet and one cleanup pass has run."""

    mode: Mode = "token"
    applied: dict[str, list[Applied]] = field(default_factory=dict)
    journals: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """endpoint -> partition -> the message ids its journal applied, in order (an app without
    journals: its state-based stream's, or its audit rows', in no particular order)."""
    caused: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """endpoint -> message id -> ids of the messages its audit row says it caused."""
    rows: dict[str, ModeReading] = field(default_factory=dict)
    """endpoint -> its mode's dedup data."""
    poisoned: dict[str, int] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    """Shared payloads left (``shared.bus.payloads``)."""
    outbox_records: dict[str, int] = field(default_factory=dict)
    within_window: bool = True
    """False once simulated time went past the dedup window while copies were still about
    (a stall under unbounded timing): dedup records may then have expired legitimately."""
    beyond: Observation | None = None
    """Window modes: the stores after one more cleanup pass past the dedup window."""
    ledger: list[tuple[str, str]] | None = None
    """The effect shape: (key, order) of every charge the provider applied; None: no
    provider in this run."""
    uncommitted: list[str] = field(default_factory=list)
    """The effect shape: keys the provider applied before their requesting round committed."""
    in_progress: int = 0
    """The effect shape: calls the provider answered 409, a call under their key still held."""
    at_most_once: bool = False
    """The effect shape's service honours no key (EffectsAppliedAtMostOnce judges it)."""
    deliveries: list[Delivery] = field(default_factory=list)
    """What every audit row says its message caused, delivery by delivery."""
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    """endpoint -> partition -> its state's data, for apps without journals (``observe``)."""
    requests: dict[str, list[str]] = field(default_factory=dict)
    """The session phase: how each send of each request ended (``lab.sim.sessions``)."""
    instances: dict[str, dict[str, Instance]] = field(default_factory=dict)
    """The saga phase: endpoint -> instance (partition) -> its row at the end."""
    outcomes: dict[str, dict[str, list[Ended]]] = field(default_factory=dict)
    """The saga phase: endpoint -> message id -> what each of its audit rows says."""
    cancellable: dict[str, CancelEnd] = field(default_factory=dict)
    """The cancel phase: message id -> the audit rows of each message a cancel races."""
    answers: list[str] = field(default_factory=list)
    """The cancel phase: what each of the client's cancels answered, in order."""
    seen_processed: list[str] = field(default_factory=list)
    """The cancel phase: ids of the raced messages an invocation processed, once a time."""
    pending: dict[str, list[str]] = field(default_factory=dict)
    """The cancel phase: the saga's instance (partition) -> its pending timeouts' ids."""
    cancel_commands: set[str] = field(default_factory=set)
    """The cancel phase: ids of the ``bus.CancelScheduled`` commands that were processed."""
    audit_kept: bool = True
    """False when audit rows may have expired during the run (stalls past the retention)."""

    def expected(self) -> dict[tuple[str, str], Applied]:
        """(endpoint, logical name) -> what the handler applied."""
        return {(e, a.name): a for e, entries in self.applied.items() for a in entries}

    def names(self) -> dict[str, str]:
        """Message id -> logical name, for every message this run applied (ids differ
        between runs whose client sends interleaved differently; names do not)."""
        return {a.id: a.name for entries in self.applied.values() for a in entries}


async def _rows(
    account: StorageAccount, endpoint: str, sql: Mapping[str, EndpointState]
) -> AsyncIterator[Entity]:
    """Every row of the endpoint, from its table or, for a SQL endpoint, from its rows there
    (kept in the table's layout), read as the bus reads them."""
    store = sql.get(endpoint)
    rows = TableRows(account.table(endpoint)) if store is None else store.rows()
    async for entity in rows.every():
        yield entity


async def observe(
    account: StorageAccount,
    endpoints: list[str],
    tokens_container: str,
    mode: Mode = "token",
    sql: Mapping[str, EndpointState] | None = None,
    *,
    payloads_container: str = "",
    modes: Mapping[str, Mode] | None = None,
    journaled: bool = True,
) -> Observation:
    """``modes``: each endpoint's mode where it is not ``mode``. ``journaled`` False: an app
    whose states keep no journal (a user's, ``lab.verify``): what each endpoint applied is read
    from its audit rows, its states are kept as they are (``Observation.states``), and a
    state-based stream is judged against its own order."""
    seen = Observation(mode)
    for endpoint in endpoints:
        entries: list[Applied] = []
        journals: dict[str, list[str]] = {}
        caused: dict[str, list[str]] = {}
        states: dict[str, str] = {}
        audited: dict[str, list[str]] = {}
        rows = ModeReading((modes or {}).get(endpoint, mode))
        outbox = 0
        async for entity in _rows(account, endpoint, sql or {}):
            if entity.row_key == STATE_ROW and not journaled:
                states[entity.partition_key] = str(entity["data"])
            elif entity.row_key == STATE_ROW:
                journal = Journal.model_validate_json(str(entity["data"])).applied
                entries += journal
                journals[entity.partition_key] = [a.id for a in journal]
            elif entity.row_key.startswith(AUDIT_PREFIX):
                ids = sorted(str(c["id"]) for c in json.loads(str(entity["caused"])))
                caused[entity.row_key[len(AUDIT_PREFIX) :]] = ids
                audited.setdefault(entity.partition_key, []).append(str(entity["message_id"]))
                seen.deliveries += [
                    Delivery(endpoint, str(entity["message_id"]), str(c["id"]), c["destination"])
                    for c in json.loads(str(entity["caused"]))
                ]
                if endpoint == PERFORMER_ENDPOINT or not journaled:
                    entries.append(_performed(entity))
            elif entity.row_key.startswith(OUTBOX_PREFIX):
                outbox += 1
            rows.read(entity)
        if not journaled and rows.mode == "state_based":  # its own order: the stream's
            journals = {p: [v.message_id for v in vs] for p, vs in rows.versions.items()}
        elif not journaled:
            journals = audited
        seen.applied[endpoint] = entries
        seen.journals[endpoint] = journals
        seen.states[endpoint] = states
        seen.caused[endpoint] = caused
        seen.rows[endpoint] = rows
        seen.outbox_records[endpoint] = outbox
        seen.queued[endpoint] = await account.queue(endpoint).approximate_count()
        seen.poisoned[endpoint] = await account.queue(poison_queue(endpoint)).approximate_count()
    seen.tokens = [p.name async for p in account.blob_container(tokens_container).list()]
    if payloads_container:
        seen.payloads = [p.name async for p in account.blob_container(payloads_container).list()]
    return seen


def _performed(audit: Entity) -> Applied:
    """What the bus's performer endpoint applied, read from its audit row: it keeps no
    journal (its handler is the bus's own), and its audit row commits with its processing.
    Its messages' ids derive from their causes', so an id names one across runs."""
    causation = str(audit["causation_id"])
    return Applied(
        id=str(audit["message_id"]),
        name=str(audit["message_id"]),
        source=str(audit["source"]),
        causation=causation or None,
        digest=str(audit["message_type"]),
    )


def check(
    run: Observation,
    reference: Observation,
    *,
    client: str,
    residue: bool,
    excused: Collection[str] = (),
    parked_checked: bool = False,
) -> list[Violation]:
    """Every violated invariant, with what shows it. ``excused``: the logical names of
    messages a run may leave unapplied, with everything they cause (parked or discarded ones:
    ``check_parked`` judges them); ``parked_checked``: the poison queues may hold entries,
    ``check_parked`` accounts for each."""
    found: list[Violation] = []
    expected = reference.expected()
    names, reference_names = run.names(), reference.names()
    for endpoint, entries in run.applied.items():
        counts = Counter(a.name for a in entries)
        for name, count in sorted(counts.items()):
            if count > 1:
                ids = sorted({a.id for a in entries if a.name == name})
                found.append(
                    Violation(
                        NO_DUPLICATED_PROCESSING,
                        f"{endpoint} applied message {name} {count} times"
                        + (f" (as {len(ids)} messages: {', '.join(ids)})" if len(ids) > 1 else ""),
                    )
                )
        found += [
            Violation(NO_EARLY_DELIVERY, f"{endpoint} processed {a.name} before its due time")
            for a in entries
            if a.early
        ]
        found += [
            Violation(
                NO_MISREAD_MESSAGES,
                f"{endpoint} processed {a.name} by an old version that cannot read it",
            )
            for a in entries
            if a.misread
        ]
        applied_ids = {(endpoint, a.id) for a in entries}
        applied_names = {(endpoint, a.name) for a in entries}
        for entry in entries:
            reference_entry = expected.get((endpoint, entry.name))
            cause_applied = entry.source == client or any(
                a.id == entry.causation for a in run.applied.get(entry.source, [])
            )
            if reference_entry is None or not cause_applied:
                found.append(
                    Violation(
                        NO_GHOST_MESSAGES,
                        f"{endpoint} applied {entry.id} from {entry.source}, caused by "
                        f"{entry.causation}, which "
                        + ("no fault-free run sends" if reference_entry is None else "never ran"),
                    )
                )
            elif reference_entry.digest != entry.digest:
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint} received message {entry.id} with different content",
                    )
                )
        wanted_by_name = {
            reference_names.get(m, m): sorted(reference_names.get(c, c) for c in caused)
            for m, caused in reference.caused.get(endpoint, {}).items()
        }
        for message_id, caused in sorted(run.caused.get(endpoint, {}).items()):
            name = names.get(message_id, message_id)
            wanted = wanted_by_name.get(name)
            named = sorted(names.get(c, c) for c in caused)
            if wanted is not None and wanted != named:
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint} processing {name} caused {named}, not {wanted}",
                    )
                )
            if (endpoint, message_id) not in applied_ids:
                found.append(
                    Violation(
                        NO_LOST_MESSAGES,
                        f"{endpoint} has an audit row for {message_id}, which its state never "
                        "applied",
                    )
                )
        missing = sorted(
            m
            for (e, m) in expected
            if e == endpoint and (e, m) not in applied_names and _root(m) not in excused
        )
        if missing:
            found.append(
                Violation(NO_LOST_MESSAGES, f"{endpoint} never applied {', '.join(missing)}")
            )
        if run.poisoned.get(endpoint) and not parked_checked:
            found.append(
                Violation(
                    NO_LOST_MESSAGES,
                    f"{run.poisoned[endpoint]} message(s) parked in the poison queue of {endpoint}",
                )
            )
        if run.queued.get(endpoint):
            found.append(
                Violation(
                    NO_LOST_MESSAGES,
                    f"{run.queued[endpoint]} message(s) still queued at {endpoint} when the "
                    "run stopped",
                )
            )
        found += _dedup_records(run, endpoint)
        found += _state_stream(run, reference, endpoint)
    if residue:
        found += _residue(run)
    return found + _effects(run)


def check_records(run: Observation, *, residue: bool) -> list[Violation]:
    """The checks of ``check`` that need no fault-free run: each window mode's dedup
    records against the audit rows, each state-based stream against its own history, and
    (``residue``) BoundedResidue."""
    found: list[Violation] = []
    for endpoint in run.applied:
        found += _dedup_records(run, endpoint)
        found += _state_stream(run, Observation(run.mode), endpoint)
    return found + (_residue(run) if residue else [])


def _effects(run: Observation) -> list[Violation]:
    """EffectsAppliedOnce: every effect a committed round requested was applied by the
    provider once, under its key; nothing was applied for a request no round committed, nor
    before the requesting round committed. (Every answer processed once is
    NoDuplicatedProcessing and NoLostMessages on the answer's journal entry.)"""
    if run.ledger is None:
        return []
    if run.at_most_once:
        return _at_most_once(run, run.ledger)
    found: list[Violation] = []
    requested = {k: a.name for entries in run.applied.values() for a in entries for k in a.effects}
    for key, order in sorted(requested.items()):
        keys = [k for k, o in run.ledger if o == order]
        if keys != [key]:
            found.append(
                Violation(
                    EFFECTS_APPLIED_ONCE,
                    f"the effect of {order} ({key}) was applied {len(keys)} times"
                    + (f", under the keys {', '.join(keys)}" if keys else ""),
                )
            )
    found += [
        Violation(EFFECTS_APPLIED_ONCE, f"{order} was charged ({key}) but no round requested it")
        for key, order in run.ledger
        if order not in requested.values()
    ]
    found += [
        Violation(EFFECTS_APPLIED_ONCE, f"effect {key} was applied before its round committed")
        for key in dict.fromkeys(run.uncommitted)
    ]
    return found


def _at_most_once(run: Observation, ledger: list[tuple[str, str]]) -> list[Violation]:
    """EffectsAppliedAtMostOnce, for a service that honours no key: every effect a committed
    round requested was applied at most once; it has exactly one answer (succeeded, failed or
    uncertain), and a ``succeeded`` one means it was applied; nothing was applied that no
    round requested, nor before its round committed."""
    found: list[Violation] = []
    entries = [a for journal in run.applied.values() for a in journal]
    requested = {k: a.name for a in entries for k in a.effects}
    for key, name in sorted(requested.items()):
        applied = sum(1 for _, order in ledger if order == name)
        outcomes = [a.outcome for a in entries if a.name == f"{name}>answered"]
        if applied > 1:
            found.append(
                _at_most_once_broken(f"the effect of {name} ({key}) was applied {applied} times")
            )
        if len(outcomes) != 1:
            found.append(
                _at_most_once_broken(
                    f"the effect of {name} ({key}) has {len(outcomes)} answers: {outcomes}"
                )
            )
        elif outcomes == ["succeeded"] and applied != 1:
            found.append(
                _at_most_once_broken(
                    f"the effect of {name} ({key}) was answered succeeded but applied "
                    f"{applied} times"
                )
            )
    found += [
        _at_most_once_broken(f"{order} was charged ({key}) but no round requested it")
        for key, order in ledger
        if order not in requested.values()
    ]
    found += [
        _at_most_once_broken(f"effect {key} was applied before its round committed")
        for key in dict.fromkeys(run.uncommitted)
    ]
    return found


def _at_most_once_broken(detail: str) -> Violation:
    return Violation(EFFECTS_AT_MOST_ONCE, detail)


def check_sagas(run: Observation, reference: Observation) -> list[Violation]:
    """The saga phase's invariants: each endpoint's instances and its messages' audit
    outcomes against the fault-free run's. Starting messages are named by their logical
    names (``Observation.names``); the messages that found no instance, which no journal
    records, by their ids, which a run draws as the fault-free one does."""
    found: list[Violation] = []
    for endpoint, wanted in sorted(reference.instances.items()):
        got = run.instances.get(endpoint, {})
        for partition in sorted(wanted.keys() | got.keys()):
            found += _instance(
                f"{endpoint} instance {partition!r}",
                wanted.get(partition),
                got.get(partition),
                reference.names(),
                run.names(),
            )
        found += _outcomes(
            endpoint,
            reference.outcomes.get(endpoint, {}),
            run.outcomes.get(endpoint, {}),
            {p for p, instance in wanted.items() if instance.completed},
        )
    return found


def check_cancels(run: Observation, reference: Observation, *, client: str) -> list[Violation]:
    """CancelOrProcessedOnce: each raced message against the fault-free run's, the client's
    answers against its message's audit rows, and the saga's pending timeouts."""
    found: list[Violation] = []
    for message_id in sorted(reference.cancellable.keys() | run.cancellable.keys()):
        found += _raced(message_id, message_id in reference.cancellable, run)
    ours = [m for m, end in run.cancellable.items() if end.source == client]
    wanted = [m for m, end in reference.cancellable.items() if end.source == client]
    for answer in run.answers:
        for message_id in ours or wanted:
            found += _answer(message_id, answer, run)
    instances = {p: i for each in run.instances.values() for p, i in each.items()}
    for partition, pending in sorted(run.pending.items()):
        instance = instances.get(partition)
        if pending and instance is not None and instance.completed:
            found.append(_cancel_broken(f"completed instance {partition!r} keeps {pending}"))
        found += [
            _cancel_broken(f"instance {partition!r} keeps {m} pending, which ended {outcomes}")
            for m in pending
            if (outcomes := _outcomes_of(run, m))
        ]
    return found


def _outcomes_of(run: Observation, message_id: str) -> list[str]:
    end = run.cancellable.get(message_id)
    return [] if end is None else end.outcomes


def _cancel_broken(detail: str) -> Violation:
    return Violation(CANCEL_OR_PROCESSED_ONCE, detail)


def _raced(message_id: str, sent: bool, run: Observation) -> list[Violation]:
    """One raced message's audit rows and what the invocations processed of it."""
    end = run.cancellable.get(message_id)
    outcomes = [] if end is None else end.outcomes
    times = run.seen_processed.count(message_id)
    found: list[Violation] = []
    if not sent:
        found.append(_cancel_broken(f"{message_id} ended {outcomes}: no fault-free run sends it"))
    if len(outcomes) > 1:
        found.append(_cancel_broken(f"{message_id} has audit rows saying {outcomes}"))
    elif not outcomes and run.audit_kept:
        found.append(_cancel_broken(f"{message_id} was neither processed nor cancelled"))
    if times and CANCELLED in outcomes:
        found.append(
            _cancel_broken(f"{message_id} was processed, yet its audit row says cancelled")
        )
    if times > 1:
        found.append(_cancel_broken(f"{message_id} was processed {times} times"))
    return found


def _answer(message_id: str, answer: str, run: Observation) -> list[Violation]:
    """One answer of the client's cancel against what became of its message."""
    end = run.cancellable.get(message_id)
    outcomes = [] if end is None else end.outcomes
    processed = message_id in run.seen_processed or any(o != CANCELLED for o in outcomes)
    if answer == CANCELLED and not processed and (outcomes or not run.audit_kept):
        return []
    if answer == PROCESSED and processed:
        return []
    if answer == "not_found" and not outcomes and not run.audit_kept:
        return []
    became = "processed" if processed else f"audit rows {outcomes}"
    return [_cancel_broken(f"the client's cancel of {message_id} answered {answer}: {became}")]


def _instance(
    where: str,
    wanted: Instance | None,
    got: Instance | None,
    reference_names: Mapping[str, str],
    names: Mapping[str, str],
) -> list[Violation]:
    """One instance's row at the end against the fault-free run's."""
    if wanted is None:
        if got is None:
            return []
        return [
            Violation(
                NO_UNSTARTED_INSTANCE,
                f"{where} exists (started by {names.get(got.started_by, got.started_by)}), "
                "though no starting message starts it",
            )
        ]
    expected = reference_names.get(wanted.started_by, wanted.started_by)
    starter = None if got is None else names.get(got.started_by, got.started_by)
    if not wanted.completed:
        if got is None or got.completed or starter != expected:
            wrong = f"{where} is not the live instance {expected} started"
            return [Violation(NO_LOST_MESSAGES, wrong)]
        return []
    if got is None:
        # Nothing retires a completed marker within a run: the cleanup's retention of
        # markers (BUS_SAGA_RETENTION_SECONDS) outlasts it.
        return [Violation(NO_RESURRECTED_INSTANCE, f"{where}: its completed marker is gone")]
    if not got.completed:
        return [Violation(NO_RESURRECTED_INSTANCE, f"{where} is live again, started by {starter}")]
    if starter != expected:
        return [
            Violation(
                NO_RESURRECTED_INSTANCE,
                f"{where} was started again by {starter} and completed again (the first "
                f"instance was started by {expected})",
            )
        ]
    return []


def _outcomes(
    endpoint: str,
    wanted: Mapping[str, list[Ended]],
    got: Mapping[str, list[Ended]],
    completed: set[str],
) -> list[Violation]:
    """SagaNotFoundOnce and NoProcessingAfterCompletion, message by message."""
    found: list[Violation] = []
    for message_id in sorted(wanted.keys() | got.keys()):
        outcomes = [e.outcome for e in got.get(message_id, [])]
        expected = [e.outcome for e in wanted.get(message_id, [])]
        if expected != [NOT_FOUND]:
            if NOT_FOUND in outcomes:
                found.append(
                    Violation(
                        SAGA_NOT_FOUND_ONCE,
                        f"{endpoint} acknowledged {message_id} as {NOT_FOUND}; the fault-free "
                        f"run's outcome is {expected or 'none'}",
                    )
                )
            continue
        partition = wanted[message_id][0].partition
        if PROCESSED in outcomes and partition in completed:
            found.append(
                Violation(
                    NO_PROCESSING_AFTER_COMPLETION,
                    f"{endpoint} processed {message_id}, a message for completed instance "
                    f"{partition!r}",
                )
            )
        elif outcomes != [NOT_FOUND]:
            found.append(
                Violation(
                    SAGA_NOT_FOUND_ONCE,
                    f"{endpoint}'s audit rows of {message_id}, for no live instance "
                    f"({partition!r}), say {outcomes or 'nothing'}: one {NOT_FOUND} is wanted",
                )
            )
    return found


def _root(name: str) -> str:
    """The client's key a logical name descends from (``m0>step`` -> ``m0``)."""
    return name.partition(">")[0]


def _dedup_records(run: Observation, endpoint: str) -> list[Violation]:
    """A window mode's dedup records against the journal and the audit rows."""
    rows = run.rows.get(endpoint)
    if rows is None or rows.mode not in WINDOW_MODES:
        return []
    found: list[Violation] = []
    applied = {a.id for a in run.applied.get(endpoint, [])}
    audited = run.caused.get(endpoint, {})
    records = rows.by_message()
    for message_id, same in sorted(records.items()):
        if len(same) > 1:
            found.append(
                Violation(
                    NO_DUPLICATED_PROCESSING,
                    f"{endpoint} recorded message {message_id} as processed {len(same)} times",
                )
            )
        if message_id not in applied:
            found.append(
                Violation(
                    NO_LOST_MESSAGES,
                    f"{endpoint} recorded {message_id} as processed but its state never applied "
                    "it: every copy would be skipped",
                )
            )
        caused = audited.get(message_id)
        for record in same:
            if caused is None:
                continue
            signals = list(record.signals) if record.signals is not None else None
            if record.outputs != len(caused) or (signals is not None and signals != caused):
                committed = signals if signals is not None else f"{record.outputs} signal(s)"
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint}'s {rows.mode} record of {message_id} committed {committed}; "
                        f"its audit row says {caused}",
                    )
                )
    if run.within_window:
        unrecorded = sorted(applied - records.keys())
        if unrecorded:
            found.append(
                Violation(
                    NO_DUPLICATED_PROCESSING,
                    f"{endpoint} applied {', '.join(unrecorded)} without its {rows.mode} "
                    "dedup record inside the dedup window: the next copy would apply it again",
                )
            )
    return found


def _state_stream(run: Observation, reference: Observation, endpoint: str) -> list[Violation]:
    """State-based: the version stream must be the history of the state (inside the window,
    before any truncation)."""
    rows = run.rows.get(endpoint)
    if rows is None or rows.mode != "state_based" or not run.within_window:
        return []
    found: list[Violation] = []
    journals = run.journals.get(endpoint, {})
    for partition in sorted(journals.keys() | rows.versions.keys()):
        versions = rows.versions.get(partition, [])
        messages = [v.message_id for v in versions]
        repeated = sorted(m for m, n in Counter(messages).items() if n > 1)
        if repeated:
            found.append(
                Violation(
                    NO_DUPLICATED_PROCESSING,
                    f"{endpoint} partition {partition!r}: {', '.join(repeated)} produced more "
                    "than one version each",
                )
            )
        head = rows.heads.get(partition)
        journal = journals.get(partition, [])
        numbers = [v.number for v in versions]
        if (
            numbers != list(range(1, len(versions) + 1))
            or head is None
            or head.version != len(versions)
            or messages != journal
        ):
            found.append(
                Violation(
                    CONSISTENT_OUTPUT,
                    f"{endpoint} partition {partition!r}: the stream "
                    f"{list(zip(numbers, messages, strict=True))} with head "
                    f"{None if head is None else head.version} is not the history of a state "
                    f"that applied {journal}",
                )
            )
        elif versions and head is not None and versions[-1].data != head.data:
            found.append(
                Violation(
                    CONSISTENT_OUTPUT,
                    f"{endpoint} partition {partition!r}: the latest version's state differs "
                    "from the state row",
                )
            )
    produced = {(p, v.number): v for p, vs in rows.versions.items() for v in vs}
    for record in rows.records:
        version = produced.get((record.partition, record.version or 0))
        if version is None or version.message_id != record.message_id:
            found.append(
                Violation(
                    CONSISTENT_OUTPUT,
                    f"{endpoint}'s index row of {record.describe()} points at version "
                    f"{record.version}, which {record.message_id} did not produce",
                )
            )
    reference_rows = reference.rows.get(endpoint)
    if reference_rows is not None:
        reference_names, names = reference.names(), run.names()
        wanted = {
            reference_names.get(v.message_id, v.message_id): v.outputs
            for vs in reference_rows.versions.values()
            for v in vs
        }
        for version in produced.values():
            outputs = wanted.get(names.get(version.message_id, version.message_id))
            if outputs is not None and outputs != version.outputs:
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint} version {version.number} records other outputs for "
                        f"{version.message_id} than the fault-free run",
                    )
                )
    return found


def _residue(run: Observation) -> list[Violation]:
    found: list[Violation] = []
    if run.tokens:
        found.append(
            Violation(
                BOUNDED_RESIDUE,
                f"{len(run.tokens)} token(s) left after the cleanup pass: "
                + ", ".join(run.tokens[:3]),
            )
        )
    if run.payloads:
        found.append(
            Violation(
                BOUNDED_RESIDUE,
                f"{len(run.payloads)} shared payload(s) left after the cleanup pass: "
                + ", ".join(run.payloads[:3]),
            )
        )
    records = {e: n for e, n in run.outbox_records.items() if n}
    if records:
        found.append(
            Violation(BOUNDED_RESIDUE, f"outbox records left after the cleanup: {records}")
        )
    later = run.beyond
    if later is None:
        return found
    if later.tokens:
        found.append(
            Violation(
                BOUNDED_RESIDUE,
                f"{len(later.tokens)} token(s) left after the cleanup pass beyond the dedup "
                "window: " + ", ".join(later.tokens[:3]),
            )
        )
    for endpoint, rows in sorted(later.rows.items()):
        left = rows.beyond_window()
        if left:
            found.append(
                Violation(
                    BOUNDED_RESIDUE,
                    f"{endpoint} kept {len(left)} row(s) of dedup data after a cleanup pass "
                    f"beyond the dedup window: {', '.join(left[:3])}",
                )
            )
    return found


@dataclass(frozen=True)
class ParkedEntry:
    """One entry of a poison queue at the end of a run."""

    message_id: str | None
    original: str | None
    """The parked original it refers to (by-reference form), if any."""
    readable: bool
    """Whether a replay would find its signal: inline, or in an original that exists."""


@dataclass
class ParkedObservation:
    """An endpoint's poison queue and parked originals once a run is quiet, every hold has
    run out and one more cleanup pass has run."""

    entries: list[ParkedEntry] = field(default_factory=list)
    originals: set[str] = field(default_factory=set)
    expired: int = 0
    """Poison entries the queue dropped at their expiry during the run."""


async def observe_parked(
    account: StorageAccount, endpoint: str, container: str, expired: int
) -> ParkedObservation:
    seen = ParkedObservation(expired=expired)
    parked = account.blob_container(container)
    seen.originals = {b.name async for b in parked.list(f"{endpoint}/")}
    for message in await account.queue(poison_queue(endpoint)).peek(32):
        original = read_poison(message.content).original
        try:
            readable = unwrap(message.content, endpoint).signal is not None
        except Unreadable:
            readable = False
        if not readable and original is not None:
            try:
                await parked.read(original)
                readable = True
            except NotFound:
                readable = False
        entry = ParkedEntry(read_poison(message.content).message_id, original, readable)
        seen.entries.append(entry)
    return seen


def check_parked(
    run: Observation,
    parked: ParkedObservation,
    endpoint: str,
    kept: Mapping[str, str],
) -> list[Violation]:
    """The parked phase's invariants. ``kept``: message id -> logical name of every parked
    message the operator did not discard (none of them may be lost)."""
    found: list[Violation] = []
    applied = Counter(a.name for a in run.applied.get(endpoint, []))
    readable = {e.message_id for e in parked.entries if e.readable}
    for message_id, name in sorted(kept.items()):
        if not applied[name] and message_id not in readable:
            found.append(
                Violation(
                    NO_LOST_PARKED,
                    f"parked message {name} ({message_id}) is neither applied by {endpoint} "
                    "nor parked with a readable body",
                )
            )
    if parked.expired:
        found.append(
            Violation(
                NO_EXPIRED_ENTRY,
                f"{parked.expired} entr{'y' if parked.expired == 1 else 'ies'} of "
                f"{poison_queue(endpoint)} expired before the cleanup re-parked "
                f"{'it' if parked.expired == 1 else 'them'}",
            )
        )
    referred = {e.original for e in parked.entries if e.original is not None}
    found += [
        Violation(
            ORIGINAL_KEPT,
            f"an entry of {poison_queue(endpoint)} refers to parked original {name}, which is gone",
        )
        for name in sorted(referred - parked.originals)
    ]
    orphans = sorted(parked.originals - referred)
    if orphans:
        found.append(
            Violation(
                BOUNDED_PARKED_RESIDUE,
                f"{len(orphans)} parked original(s) no entry refers to left after a cleanup "
                f"pass: {', '.join(orphans)}",
            )
        )
    return found
