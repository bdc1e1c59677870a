"""Each endpoint mode's record of what it processed, read back from its table in one form.

The invariants must mean the same thing whatever the mode, but every mode keeps its dedup data
differently (``docs/modes.md``):
- ``token``: O(m) rows, retired by the cleanup once their message is done (counted by
  ``lab.sim.invariants.observe``; nothing here);
- ``processed_messages``: one ``processed|{m}`` row per message;
- ``state_based``: one ``msgidx|{m}`` index row per message, the ``version|{n}`` stream and
  the version number in the ``state`` row (the stream's head);
- ``entity_outbox``: one entry per message in the outbox map inside the ``state`` row.

``ModeReading`` turns these into ``DedupRecord``s (what the mode says it committed for message m)
and, for the state-based stream, ``StreamVersion``s and each partition's head, so that the
checks compare like with like across modes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.bus.app import Mode
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX, ProcessedRecord
from shared.bus.modes.state_based import INDEX_PREFIX, VERSION_PREFIX, IndexEntry, Version
from shared.bus.records import STATE_ROW
from shared.stores.table import Entity

WINDOW_MODES: tuple[Mode, ...] = ("processed_messages", "state_based", "entity_outbox")
"""The modes whose dedup records expire after a retention period (their dedup window)."""


@dataclass(frozen=True)
class DedupRecord:
    """A mode's record that message ``message_id`` was processed (and committed) once."""

    partition: str
    message_id: str
    outputs: int
    """How many output signals (one per delivery) the commit recorded."""
    signals: tuple[str, ...] | None
    """Message ids of those signals, sorted, where the record keeps them (the entity-outbox
    map drops them once dispatched and keeps only their attempt ids)."""
    version: int | None = None
    """State-based: the version of the stream this message produced."""

    def describe(self) -> str:
        return f"{self.message_id} (partition {self.partition!r})"


@dataclass(frozen=True)
class StreamVersion:
    """One ``version|{n}`` row of a state-based stream."""

    number: int
    message_id: str
    data: str
    """The state after this version."""
    outputs: tuple[str, ...]
    """Fingerprints of the handler's outputs (type, destination, body digest)."""


@dataclass(frozen=True)
class StreamHead:
    version: int
    data: str


@dataclass
class ModeReading:
    """What one endpoint's table holds of its mode's dedup data."""

    mode: Mode
    records: list[DedupRecord] = field(default_factory=list)
    versions: dict[str, list[StreamVersion]] = field(default_factory=dict)
    """State-based: partition -> its version rows, in version order."""
    heads: dict[str, StreamHead] = field(default_factory=dict)
    """State-based: partition -> the version and state its ``state`` row holds."""

    def read(self, entity: Entity) -> None:
        """Take in one row of the endpoint's table (rows of no concern to the mode are
        ignored; rows are read in PartitionKey, RowKey order)."""
        key, partition = entity.row_key, entity.partition_key
        if self.mode == "processed_messages" and key.startswith(PROCESSED_PREFIX):
            processed = ProcessedRecord.from_entity(entity)
            self.records.append(
                DedupRecord(
                    partition,
                    processed.message_id,
                    len(processed.outgoing),
                    tuple(sorted(o.message_id for o in processed.outgoing)),
                )
            )
        elif self.mode == "state_based":
            self._read_stream(entity)
        elif self.mode == "entity_outbox" and key == STATE_ROW:
            for message_id, entry in StateEntity.from_entity(entity).entries.items():
                signals = None if entry.out is None else sorted(o.message_id for o in entry.out)
                self.records.append(
                    DedupRecord(
                        partition,
                        message_id,
                        len(entry.sent),
                        None if signals is None else tuple(signals),
                    )
                )

    def _read_stream(self, entity: Entity) -> None:
        key, partition = entity.row_key, entity.partition_key
        if key.startswith(INDEX_PREFIX):
            entry = IndexEntry.from_entity(entity)
            self.records.append(
                DedupRecord(
                    partition,
                    entry.message_id,
                    len(entry.outgoing),
                    tuple(sorted(o.message_id for o in entry.outgoing)),
                    entry.version,
                )
            )
        elif key.startswith(VERSION_PREFIX):
            version = Version.from_entity(entity)
            self.versions.setdefault(partition, []).append(
                StreamVersion(
                    version.version,
                    version.message_id,
                    version.data,
                    tuple(f"{o['type']}>{o['to']}:{o['sha256']}" for o in version.outputs),
                )
            )
        elif key == STATE_ROW:
            self.heads[partition] = StreamHead(int(str(entity["version"])), str(entity["data"]))

    def by_message(self) -> dict[str, list[DedupRecord]]:
        found: dict[str, list[DedupRecord]] = {}
        for record in self.records:
            found.setdefault(record.message_id, []).append(record)
        return found

    def beyond_window(self) -> list[str]:
        """What is left of the dedup data that a cleanup pass run after every record's window
        must have removed (the rule of BoundedResidue for window modes):
        - ``processed_messages``: every ``processed|`` row;
        - ``entity_outbox``: every entry of every outbox map (the state row itself stays);
        - ``state_based``: every version but the partition's head, and every index row but
          the head version's (truncation always keeps the latest version, so that the next
          message has a state to start from, and its index row with it)."""
        left: list[str] = []
        if self.mode in ("processed_messages", "entity_outbox"):
            left += [f"record of {r.describe()}" for r in self.records]
        elif self.mode == "state_based":
            for partition, versions in sorted(self.versions.items()):
                head = self.heads.get(partition)
                left += [
                    f"version {v.number} of partition {partition!r}"
                    for v in versions
                    if head is None or v.number != head.version
                ]
            for record in self.records:
                head = self.heads.get(record.partition)
                if head is None or record.version != head.version:
                    left.append(f"index row of {record.describe()}")
        return left
