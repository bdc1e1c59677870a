"""The invariants ``bus verify`` checks on a user's app, which keeps no journal: what each
endpoint processed is read from its audit rows (one per processed message, committed with
it), what it sent from the same rows' lists of deliveries.

Judged from the run alone (whatever order its messages took):
- NoLostMessages: every message the app sent to one of its endpoints, and every input, was
  processed there; nothing is left queued or parked (but what the fault-free run leaves
  unprocessed and parked too: a handler that refuses a message, ``DoNotRetry``).
- NoGhostMessages: everything processed is an input or a delivery some processed message
  sent (its audit row lists it).
- NoDuplicatedProcessing: no message processed twice by one endpoint, and the window modes'
  dedup records and state-based streams agree with the audit rows
  (``lab.sim.invariants.check_records``, with BoundedResidue).
- EffectsAppliedOnce: no effect applied twice by the service.
- DeterministicHandler: no handler of a state-based endpoint gave another result for the
  same message, state and processing time (``lab.verify.observed``).

Judged against the fault-free run of the same inputs, where order cannot matter:
- ConsistentOutput: a partition that one message reached there ends in the same state, and
  that message caused the same deliveries. Partitions that several messages reach may
  legitimately end otherwise when the messages come in another order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from lab.sim.invariants import (
    BOUNDED_RESIDUE,
    CONSISTENT_OUTPUT,
    EFFECTS_APPLIED_ONCE,
    NO_DUPLICATED_PROCESSING,
    NO_GHOST_MESSAGES,
    NO_LOST_MESSAGES,
    Observation,
    Violation,
    check_records,
)
from lab.verify.observed import Recorder
from shared.bus.poison import read_poison
from shared.logsafe import shown
from shared.resources import poison_queue
from shared.stores.account import StorageAccount

DETERMINISTIC_HANDLER = "DeterministicHandler"
STATE_SHOWN = 120
"""Characters of a state a violation shows."""


@dataclass
class Outcome:
    """What a user's run leaves for the checks beside the stores."""

    observation: Observation
    recorder: Recorder
    ledger: list[str] = field(default_factory=list)
    """The keys of the effects the services applied, in order."""
    parked: dict[str, set[str]] = field(default_factory=dict)
    """endpoint -> the ids of the messages its poison queue holds."""


async def parked_ids(account: StorageAccount, endpoint: str) -> set[str]:
    """The message ids of ``endpoint``'s poison entries (one message may be parked once per
    copy: nothing committed, every copy was refused)."""
    entries = await account.queue(poison_queue(endpoint)).peek(32)
    return {read_poison(entry.content).message_id or "?" for entry in entries}


def check_app(run: Outcome, reference: Outcome, *, client: str, residue: bool) -> list[Violation]:
    seen = run.observation
    return (
        _flow(run, reference, client)
        + check_records(seen, residue=residue and not _leaves(reference.observation))
        + (_more_residue(seen, reference.observation) if residue else [])
        + _consistent(seen, reference.observation)
        + _effects(run.ledger)
        + _determinism(run)
    )


def _flow(outcome: Outcome, wanted: Outcome, client: str) -> list[Violation]:
    run, reference = outcome.observation, wanted.observation
    found: list[Violation] = []
    processed = _processed(run)
    sent = {(d.destination, d.message_id): d for d in run.deliveries}
    inputs = {(e, m) for e, m in _processed(reference) if _source(reference, e, m) == client}
    refused = _unprocessed(reference)  # a handler that refuses a message (DoNotRetry) parks it
    for (destination, message_id), delivery in sorted(sent.items(), key=str):
        if (destination, message_id) in _unprocessed(run) - refused:
            found.append(
                Violation(
                    NO_LOST_MESSAGES,
                    f"{delivery.source} sent {message_id} to {destination} (processing "
                    f"{delivery.cause}); {destination} never processed it",
                )
            )
    found += [
        Violation(NO_LOST_MESSAGES, f"{e} never processed the input {m}")
        for e, m in sorted(inputs - processed)
    ]
    for endpoint, entries in sorted(run.applied.items()):
        for count, message_id in _repeated(a.id for a in entries):
            found.append(
                Violation(
                    NO_DUPLICATED_PROCESSING, f"{endpoint} processed {message_id} {count} times"
                )
            )
        for entry in entries:
            known = (
                (endpoint, entry.id) in inputs
                if entry.source == client
                else ((endpoint, entry.id) in sent)
            )
            if not known:
                found.append(
                    Violation(
                        NO_GHOST_MESSAGES,
                        f"{endpoint} processed {entry.id} from {entry.source}, which no "
                        "processed message sent",
                    )
                )
        found += _left(outcome, wanted, endpoint)
    return found


def _processed(seen: Observation) -> set[tuple[str, str]]:
    return {(e, a.id) for e, entries in seen.applied.items() for a in entries}


def _unprocessed(seen: Observation) -> set[tuple[str, str]]:
    """(endpoint, message id) of every delivery to one of the app's endpoints that was not
    processed there."""
    sent = {(d.destination, d.message_id) for d in seen.deliveries if d.destination in seen.applied}
    return sent - _processed(seen)


def _source(seen: Observation, endpoint: str, message_id: str) -> str | None:
    return next((a.source for a in seen.applied[endpoint] if a.id == message_id), None)


def _repeated(ids: Iterable[str]) -> list[tuple[int, str]]:
    return sorted((n, m) for m, n in Counter(ids).items() if n > 1)


def _left(outcome: Outcome, wanted: Outcome, endpoint: str) -> list[Violation]:
    """Messages left queued, or parked other than those the fault-free run parks too (a
    handler that refuses a message parks it there as well)."""
    found = []
    queued = outcome.observation.queued.get(endpoint)
    if queued:
        found.append(
            Violation(
                NO_LOST_MESSAGES, f"{queued} message(s) still queued at {endpoint} once quiet"
            )
        )
    parked = outcome.parked.get(endpoint, set()) - wanted.parked.get(endpoint, set())
    if parked:
        found.append(
            Violation(
                NO_LOST_MESSAGES,
                f"{endpoint} parked {', '.join(sorted(parked))} in its poison queue",
            )
        )
    return found


def _leaves(seen: Observation) -> bool:
    """Whether the run left tokens or outbox records: for a message parked, they wait for it."""
    return bool(seen.tokens or seen.payloads or any(seen.outbox_records.values()))


def _more_residue(run: Observation, reference: Observation) -> list[Violation]:
    """BoundedResidue when the fault-free run leaves some (it parks a message): no more."""
    if not _leaves(reference):
        return []
    left = (len(run.tokens), len(run.payloads), run.outbox_records)
    wanted = (len(reference.tokens), len(reference.payloads), reference.outbox_records)
    more = left[0] > wanted[0] or left[1] > wanted[1]
    more = more or any(n > reference.outbox_records.get(e, 0) for e, n in left[2].items())
    if not more:
        return []
    return [
        Violation(
            BOUNDED_RESIDUE,
            f"left {left[0]} token(s), {left[1]} payload(s) and outbox records {left[2]} "
            f"after the cleanup, where the fault-free run (which parks a message) leaves "
            f"{wanted[0]}, {wanted[1]} and {wanted[2]}",
        )
    ]


def _consistent(run: Observation, reference: Observation) -> list[Violation]:
    """States and deliveries of the partitions one message reached in the fault-free run."""
    found: list[Violation] = []
    for endpoint, partitions in sorted(reference.journals.items()):
        for partition, messages in sorted(partitions.items()):
            if len(messages) != 1:
                continue
            expected = reference.states.get(endpoint, {}).get(partition)
            ended = run.states.get(endpoint, {}).get(partition)
            if ended != expected:
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint} partition {shown(partition)} ends as "
                        f"{shown(ended, STATE_SHOWN)}, not as in the fault-free run: "
                        f"{shown(expected, STATE_SHOWN)}",
                    )
                )
            [message_id] = messages
            wanted = reference.caused.get(endpoint, {}).get(message_id)
            caused = run.caused.get(endpoint, {}).get(message_id)
            if None not in (wanted, caused) and wanted != caused:
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint} processing {message_id} sent {caused}, not {wanted} as in "
                        "the fault-free run",
                    )
                )
    return found


def _effects(ledger: list[str]) -> list[Violation]:
    return [
        Violation(EFFECTS_APPLIED_ONCE, f"effect {key} was applied {count} times")
        for count, key in _repeated(ledger)
    ]


def _determinism(run: Outcome) -> list[Violation]:
    return [
        Violation(DETERMINISTIC_HANDLER, found.describe())
        for _, found in sorted(run.recorder.found.items())
        if found.judged
    ]
