"""The invariants of design notes section 6, checked from the stores after a run.

A run is compared with its reference: the same configuration run once without faults,
duplicates or concurrency. The reference says which messages must exist (every output has a
deterministic id) and what each handler must have seen.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW
from shared.resources import poison_queue
from shared.sim.model import Applied, Journal
from shared.stores.account import StorageAccount

NO_DUPLICATED_PROCESSING = "NoDuplicatedProcessing"
NO_GHOST_MESSAGES = "NoGhostMessages"
NO_LOST_MESSAGES = "NoLostMessages"
CONSISTENT_OUTPUT = "ConsistentOutput"
BOUNDED_RESIDUE = "BoundedResidue"
UNEXPECTED_ERROR = "UnexpectedError"
"""Not an invariant of the design: a simulated process raised something other than the
project's own errors, i.e. a bug in the code under test."""
INVARIANTS = (
    NO_DUPLICATED_PROCESSING,
    NO_GHOST_MESSAGES,
    NO_LOST_MESSAGES,
    CONSISTENT_OUTPUT,
    BOUNDED_RESIDUE,
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass
class Observation:
    """What the stores hold once a run is quiet and one cleanup pass has run."""

    applied: dict[str, list[Applied]] = field(default_factory=dict)
    caused: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """endpoint -> message id -> ids of the messages its audit row says it caused."""
    poisoned: dict[str, int] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    outbox_records: dict[str, int] = field(default_factory=dict)

    def expected(self) -> dict[tuple[str, str], Applied]:
        return {(e, a.id): a for e, entries in self.applied.items() for a in entries}


async def observe(
    account: StorageAccount, endpoints: list[str], tokens_container: str
) -> Observation:
    seen = Observation()
    for endpoint in endpoints:
        table = account.table(endpoint)
        entries: list[Applied] = []
        caused: dict[str, list[str]] = {}
        outbox = 0
        async for entity in table.query_all():
            if entity.row_key == STATE_ROW:
                entries += Journal.model_validate_json(str(entity["data"])).applied
            elif entity.row_key.startswith(AUDIT_PREFIX):
                ids = sorted(str(c["id"]) for c in json.loads(str(entity["caused"])))
                caused[entity.row_key[len(AUDIT_PREFIX) :]] = ids
            elif entity.row_key.startswith(OUTBOX_PREFIX):
                outbox += 1
        seen.applied[endpoint] = entries
        seen.caused[endpoint] = caused
        seen.outbox_records[endpoint] = outbox
        seen.queued[endpoint] = await account.queue(endpoint).approximate_count()
        seen.poisoned[endpoint] = await account.queue(poison_queue(endpoint)).approximate_count()
    seen.tokens = [p.name async for p in account.blob_container(tokens_container).list()]
    return seen


def check(
    run: Observation, reference: Observation, *, client: str, residue: bool
) -> list[Violation]:
    """Every violated invariant, with what shows it."""
    found: list[Violation] = []
    expected = reference.expected()
    for endpoint, entries in run.applied.items():
        counts = Counter(a.id for a in entries)
        for message_id, count in sorted(counts.items()):
            if count > 1:
                found.append(
                    Violation(
                        NO_DUPLICATED_PROCESSING,
                        f"{endpoint} applied message {message_id} {count} times",
                    )
                )
        applied_ids = {(endpoint, a.id) for a in entries}
        for entry in entries:
            reference_entry = expected.get((endpoint, entry.id))
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
        for message_id, caused in sorted(run.caused.get(endpoint, {}).items()):
            wanted = reference.caused.get(endpoint, {}).get(message_id)
            if wanted is not None and wanted != caused:
                found.append(
                    Violation(
                        CONSISTENT_OUTPUT,
                        f"{endpoint} processing {message_id} caused {caused}, not {wanted}",
                    )
                )
        missing = sorted(m for (e, m) in expected if e == endpoint and (e, m) not in applied_ids)
        if missing:
            found.append(
                Violation(NO_LOST_MESSAGES, f"{endpoint} never applied {', '.join(missing)}")
            )
        if run.poisoned.get(endpoint):
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
    if residue:
        if run.tokens:
            found.append(
                Violation(
                    BOUNDED_RESIDUE,
                    f"{len(run.tokens)} token(s) left after the cleanup pass: "
                    + ", ".join(run.tokens[:3]),
                )
            )
        records = {e: n for e, n in run.outbox_records.items() if n}
        if records:
            found.append(
                Violation(BOUNDED_RESIDUE, f"outbox records left after the cleanup: {records}")
            )
    return found
