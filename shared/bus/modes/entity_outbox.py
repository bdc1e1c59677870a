"""Entity-outbox mode (seed "outbox-based consistent messaging"): the outbox map inside the
entity.

Partition p's ``state`` row holds the business state (``data``) and the outbox map, split
over ``outbox_0``, ``outbox_1``, ... (``outbox_parts`` of them) because one property holds at
most 64 KiB. The map has one entry per incoming message processed: when it was committed,
the committed attempt ids (``sent``), and the committed signals (``out``) until they have been
dispatched. Processing a message writes the state and its entry in one update (with the audit
row in the same transaction), then dispatches the signals, then clears ``out`` (a second,
ETag-guarded update), as in the seed. A copy finds the entry in the same read that loads the
state: it dispatches ``out`` again if it is still there, and does nothing else.

The entity grows with the map. Dispatched entries older than
``BusConfig.entity_outbox_retention_seconds`` are dropped whenever the entity is written, and
by ``expire_entity_outboxes`` for entities that are not. An entity that would exceed
``BusConfig.entity_max_bytes`` (below Azure's 1 MiB) or Azure's property count is refused
with ``EntityOutboxFull`` before anything is written, and retried (expiry may make room); a
business state that alone would not fit is refused as ``TooLarge``, which no retry mends. A
business state longer than one property is spread across parts by the rows it is written to
(``shared.stores.spread``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from shared.bus.deliveries import signals_of, signals_value
from shared.bus.envelope import Signal
from shared.bus.modes.common import (
    ModePipeline,
    check_page_size,
    drop_abandoned_tokens,
    state_operation,
)
from shared.bus.modes.errors import EntityOutboxFull
from shared.bus.outgoing import Hints, send_signals
from shared.bus.pipeline import Incoming, Outcome
from shared.bus.records import STATE_ROW, AuditRecord, OutgoingSignal
from shared.bus.state.damaged import ROW_ERRORS, OnDamaged, pass_over
from shared.bus.state.rows import EndpointRows
from shared.clock import to_datetime
from shared.errors import NotFound, PreconditionFailed, TooLarge
from shared.stores.blob import BlobContainer
from shared.stores.names import MAX_CUSTOM_PROPERTIES, MAX_PROPERTY_BYTES, utf16_size
from shared.stores.spread import spread
from shared.stores.table import Entity, TableOperation

log = logging.getLogger(__name__)

PART_PREFIX = "outbox_"
PART_CHARS = (MAX_PROPERTY_BYTES - 1024) // 2  # strings are stored as UTF-16
# Properties besides the map's parts: type, data, outbox_parts.
_FIXED_PROPERTIES = 3
_ENTITY_OVERHEAD_BYTES = 400
"""The keys, the type and the property names beside the state, in UTF-16, roughly."""


@dataclass(frozen=True)
class OutboxEntry:
    at: datetime
    sent: tuple[str, ...]
    """Attempt ids of the committed output tokens; kept after dispatch, because the cleanup
    reads them to tell a committed token in flight from an abandoned one."""
    out: tuple[OutgoingSignal, ...] | None
    """The committed signals until they have been dispatched, then None."""

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "sent": list(self.sent),
            "out": None if self.out is None else signals_value(self.out),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OutboxEntry:
        out = data["out"]
        return cls(
            datetime.fromisoformat(data["at"]),
            tuple(data["sent"]),
            None if out is None else signals_of(out),
        )


@dataclass(frozen=True)
class StateEntity:
    """The decoded ``state`` row of an entity-outbox endpoint."""

    partition_key: str
    type_name: str
    data: str | None
    entries: dict[str, OutboxEntry] = field(default_factory=dict)
    etag: str = ""

    @classmethod
    def from_entity(cls, entity: Entity) -> StateEntity:
        parts = int(str(entity.get("outbox_parts", 0)))
        text = "".join(str(entity[f"{PART_PREFIX}{i}"]) for i in range(parts))
        entries = {m: OutboxEntry.from_json(e) for m, e in json.loads(text or "{}").items()}
        return cls(
            entity.partition_key, str(entity["type"]), str(entity["data"]), entries, entity.etag
        )

    def with_entry(self, message_id: str, entry: OutboxEntry) -> StateEntity:
        return replace(self, entries={**self.entries, message_id: entry})

    def cleared(self, message_id: str) -> StateEntity:
        entry = self.entries[message_id]
        return self.with_entry(message_id, replace(entry, out=None))

    def pruned(self, older_than: datetime) -> StateEntity:
        """Without the dispatched entries committed before ``older_than``."""
        kept = {m: e for m, e in self.entries.items() if e.out is not None or e.at >= older_than}
        return replace(self, entries=kept)

    def to_entity(self, max_bytes: int) -> Entity:
        """Encode, refusing with EntityOutboxFull what Table Storage would refuse."""
        data = self.data or "{}"
        text = json.dumps({m: e.to_json() for m, e in self.entries.items()})
        parts = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)]
        where = f"entity-outbox state of partition {self.partition_key!r}"
        if utf16_size(data) + _ENTITY_OVERHEAD_BYTES > max_bytes:
            # A storage limit the message's own run reached, which no expiry of the outbox
            # map mends (unlike the two below): the pipeline parks the message at once.
            raise TooLarge(
                f"{where}: the business state is {utf16_size(data):,} bytes; the entity "
                f"holds BusConfig.entity_max_bytes={max_bytes:,} with its outbox map"
            )
        data_parts = len(spread(Entity("", "", {"data": data})).properties)
        if len(parts) + data_parts + _FIXED_PROPERTIES - 1 > MAX_CUSTOM_PROPERTIES:
            raise EntityOutboxFull(
                f"{where}: the outbox map needs {len(parts)} properties and the business "
                f"state {data_parts}; an entity has at most {MAX_CUSTOM_PROPERTIES}"
            )
        size = 2 * (len(self.partition_key) + len(STATE_ROW) + len(data) + len(text) + 200)
        if size > max_bytes:
            raise EntityOutboxFull(
                f"{where}: with {len(self.entries)} outbox entries it would be about {size} "
                f"bytes, over BusConfig.entity_max_bytes={max_bytes} (Azure allows 1 MiB per "
                "entity); shorten entity_outbox_retention_seconds, run "
                "expire_entity_outboxes, or spread the load over more partitions"
            )
        properties: dict[str, str | int] = {
            "type": self.type_name,
            "data": data,
            "outbox_parts": len(parts),
        }
        for i, part in enumerate(parts):
            properties[f"{PART_PREFIX}{i}"] = part
        return Entity(self.partition_key, STATE_ROW, properties)


class EntityOutboxPipeline(ModePipeline):
    mode = "entity_outbox"

    async def _read(self, partition_key: str) -> tuple[Entity | None, StateEntity]:
        try:
            entity = await self.rows.get(partition_key, STATE_ROW)
        except NotFound:
            return None, StateEntity(partition_key, self.endpoint.state_type.__name__, None)
        return entity, StateEntity.from_entity(entity)

    def _horizon(self) -> datetime:
        retention = timedelta(seconds=self.config.entity_outbox_retention_seconds)
        return to_datetime(self.config.clock()) - retention

    async def _round(self, signal: Signal, incoming: Incoming, abandoned: list[str]) -> Outcome:
        m, p = signal.message_id, signal.partition_key
        existing, stored = await self._read(p)
        entry = stored.entries.get(m)
        if entry is not None:
            if entry.out is not None:
                await self._dispatch(p, m, entry.out, stored)
            await self._delete_incoming(signal)
            return Outcome.RESUMED
        envelope, message = await self._body(incoming)
        state = self._load_state(stored.data)
        now = to_datetime(self.config.clock())
        async with self.rows.begin() as transaction:
            context = await self._run_handler(
                envelope, message, state, now=now, sql=transaction.sql
            )
            created = await self._create_outputs(context, envelope, STATE_ROW, abandoned)
            outgoing = tuple(created.committed_candidates)
            committed_at = to_datetime(self.config.clock())
            updated = replace(stored, data=state.model_dump_json()).pruned(self._horizon())
            updated = updated.with_entry(
                # Nothing to dispatch: the entry is born cleared, saving the second write.
                m,
                OutboxEntry(committed_at, tuple(o.attempt_id for o in outgoing), outgoing or None),
            )

            def build() -> tuple[list[TableOperation], AuditRecord]:
                row = updated.to_entity(self.config.entity_max_bytes)
                operations = [state_operation(existing, row)]
                return operations, self._audit(envelope, outgoing, committed_at)

            etags = await self._commit(transaction, build, created, abandoned)
        if outgoing:
            await self._dispatch(
                p, m, outgoing, replace(updated, etag=etags[0] or ""), created.hints
            )
        await self._delete_incoming(signal)
        return Outcome.PROCESSED

    async def _dispatch(
        self,
        partition_key: str,
        message_id: str,
        out: tuple[OutgoingSignal, ...],
        at: StateEntity,
        hints: Hints | None = None,
    ) -> None:
        """Send the entry's signals, then clear them from the map. Clearing only saves space
        and repeat sends: when it keeps losing to other writers it is left to the next copy or
        to ``expire_entity_outboxes``."""
        await send_signals(self.account, out, hints, config=self.config)
        stored = at
        for _ in range(self.config.max_conflict_rounds):
            entry = stored.entries.get(message_id)
            if entry is None or entry.out is None:
                return
            cleared = stored.cleared(message_id).pruned(self._horizon())
            try:
                await self.rows.update(cleared.to_entity(self.config.entity_max_bytes), stored.etag)
                return
            except PreconditionFailed:
                _, stored = await self._read(partition_key)
        log.warning(
            "endpoint %s: could not clear the dispatched outbox entry of %s in partition %r",
            self.endpoint.name,
            message_id,
            partition_key,
        )


async def expire_entity_outboxes(
    rows: EndpointRows,
    *,
    tokens: BlobContainer,
    older_than: datetime,
    page_size: int = 100,
    continuation: str | None = None,
    on_damaged: OnDamaged | None = None,
) -> tuple[int, str | None]:
    """Drop outbox entries committed before ``older_than`` (now minus
    ``BusConfig.entity_outbox_retention_seconds``) from the entities of one page of up to
    ``page_size`` partitions; returns how many entries were dropped and the continuation
    (None when done). Each entity is rewritten with its ETag; one changed meanwhile is left for
    the next pass. An entry whose signals were never dispatched is dropped too once no
    uncommitted token of its message is left (a copy would dispatch them; after the window
    there is none). Uncommitted tokens of dropped entries are deleted first.

    A late duplicate beyond the window: its incoming token is normally gone (deleted right
    after the first processing) and the copy is acknowledged without reading anything. Only a
    message whose first processing committed but never finished and that is replayed after
    its entry was dropped can be processed a second time, and only once the message's audit
    row (inserted by the same commit, kept for the audit retention) is gone too: while it
    exists a second commit fails on it.

    An entity that cannot be read goes to ``on_damaged`` and is left as it is
    (``shared.bus.state.damaged``).
    """
    check_page_size(page_size)
    entities, following = await rows.page(
        row_key=STATE_ROW, page_size=page_size, continuation=continuation, on_damaged=on_damaged
    )
    dropped = 0
    for entity in entities:
        try:
            dropped += await _expire_entries(rows, entity, tokens, older_than)
        except ROW_ERRORS as e:
            pass_over(on_damaged, rows.damaged(entity, e))
    return dropped, following


async def _expire_entries(
    rows: EndpointRows, entity: Entity, tokens: BlobContainer, older_than: datetime
) -> int:
    """Drop one entity's expired entries; returns how many were dropped."""
    stored = StateEntity.from_entity(entity)
    expired = [m for m, e in stored.entries.items() if e.at < older_than]
    kept = dict(stored.entries)
    for m in expired:
        if await drop_abandoned_tokens(
            tokens, rows.name, m, stored.entries[m].sent, older_than=older_than
        ):
            del kept[m]
    if len(kept) == len(stored.entries):
        return 0
    trimmed = replace(stored, entries=kept)
    try:
        await rows.update(trimmed.to_entity(1 << 30), entity.etag)
    except PreconditionFailed:
        return 0
    return len(stored.entries) - len(kept)
