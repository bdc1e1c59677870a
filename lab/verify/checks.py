"""The invariants ``bus verify`` checks on a user's app, which keeps no journal: what each
endpoint processed is read from its audit rows (one per processed message, committed with
it), what it sent from the same rows' lists of deliveries.

Judged from the run alone (whatever order its messages took):
- NoLostMessages: every message the app sent to one of its endpoints, and every input, was
  processed there; nothing is left queued or parked.
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
from shared.logsafe import shown

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


def check_app(run: Outcome, reference: Outcome, *, client: str, residue: bool) -> list[Violation]:
    seen = run.observation
    return (
        _flow(seen, reference.observation, client)
        + check_records(seen, residue=residue)
        + _consistent(seen, reference.observation)
        + _effects(run.ledger)
        + _determinism(run)
    )


def _flow(run: Observation, reference: Observation, client: str) -> list[Violation]:
    found: list[Violation] = []
    processed = {(e, a.id) for e, entries in run.applied.items() for a in entries}
    sent = {(d.destination, d.message_id): d for d in run.deliveries}
    inputs = {(e, a.id) for e, entries in reference.applied.items() for a in entries}
    inputs = {(e, m) for e, m in inputs if _source(reference, e, m) == client}
    for (destination, message_id), delivery in sorted(sent.items(), key=str):
        if destination in run.applied and (destination, message_id) not in processed:
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
        found += _left(run, endpoint)
    return found


def _source(seen: Observation, endpoint: str, message_id: str) -> str | None:
    return next((a.source for a in seen.applied[endpoint] if a.id == message_id), None)


def _repeated(ids: Iterable[str]) -> list[tuple[int, str]]:
    return sorted((n, m) for m, n in Counter(ids).items() if n > 1)


def _left(run: Observation, endpoint: str) -> list[Violation]:
    found = []
    if run.queued.get(endpoint):
        found.append(
            Violation(
                NO_LOST_MESSAGES,
                f"{run.queued[endpoint]} message(s) still queued at {endpoint} once quiet",
            )
        )
    if run.poisoned.get(endpoint):
        found.append(
            Violation(
                NO_LOST_MESSAGES,
                f"{run.poisoned[endpoint]} message(s) parked in the poison queue of {endpoint}",
            )
        )
    return found


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
