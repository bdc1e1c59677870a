"""Endpoint state in the endpoint's Table Storage table: state, O(m) and audit rows share the
partition, and the commit is one entity-group transaction (design notes section 2)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime

from shared.bus.records import (
    AUDIT_PREFIX,
    OUTBOX_PREFIX,
    STATE_ROW,
    AuditRecord,
    OutboxRecord,
    outbox_row,
)
from shared.bus.state.base import EndpointState, Snapshot, StateRow, StateTransaction, StateWrite
from shared.bus.state.damaged import OnDamaged, read_each
from shared.bus.state.rows import ModeRows, TableRows
from shared.stores.table import Entity, Insert, Table, TableOperation, Update


def state_row(entity: Entity) -> StateRow:
    return StateRow(
        entity.partition_key, str(entity.get("type", "")), str(entity["data"]), entity.etag
    )


class TableTransaction(StateTransaction):
    """Table Storage has no transaction spanning the handler: the commit is the batch."""

    def __init__(self, table: Table) -> None:
        self._table = table

    async def commit(self, state: StateWrite, outbox: OutboxRecord, audit: AuditRecord) -> str:
        entity = Entity(state.partition_key, STATE_ROW, {"type": state.type, "data": state.data})
        state_op: TableOperation = (
            Insert(entity) if state.expected is None else Update(entity, state.expected)
        )
        etags = await self._table.transact(
            [state_op, Update(outbox.to_entity(), etag=outbox.etag), Insert(audit.to_entity())]
        )
        return etags[1] or ""


class TableEndpointState(EndpointState):
    kind = "table"

    def __init__(self, table: Table) -> None:
        self.table = table
        self.name = table.name

    async def read(self, partition_key: str, message_id: str) -> Snapshot:
        page = await self.table.query(
            partition_key=partition_key, row_keys=[STATE_ROW, outbox_row(message_id)]
        )
        rows = {e.row_key: e for e in page.entities}
        state = rows.get(STATE_ROW)
        outbox = rows.get(outbox_row(message_id))
        return Snapshot(
            None if state is None else state_row(state),
            None if outbox is None else OutboxRecord.from_entity(outbox),
        )

    async def insert_outbox(self, record: OutboxRecord) -> str:
        return await self.table.insert(record.to_entity())

    async def delete_outbox(self, record: OutboxRecord) -> None:
        await self.table.delete(
            record.partition_key, outbox_row(record.message_id), etag=record.etag
        )

    async def fence_outbox(self, record: OutboxRecord) -> OutboxRecord:
        return replace(record, etag=await self.table.update(record.to_entity(), etag=record.etag))

    async def outbox_page(
        self, continuation: str | None, page_size: int, on_damaged: OnDamaged | None = None
    ) -> tuple[list[OutboxRecord], str | None]:
        page = await self.table.query(
            row_key_prefix=OUTBOX_PREFIX, page_size=page_size, continuation=continuation
        )
        records = read_each(
            page.entities,
            OutboxRecord.from_entity,
            lambda e: (e.partition_key, e.row_key),
            self.rows().where,
            on_damaged,
        )
        return records, page.continuation

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[StateTransaction]:
        yield TableTransaction(self.table)

    def rows(self) -> ModeRows:
        return TableRows(self.table)

    async def states(self) -> AsyncIterator[StateRow]:
        async for entity in self.table.query_all():
            if entity.row_key == STATE_ROW:
                yield state_row(entity)

    async def audit_page(
        self, continuation: str | None, page_size: int
    ) -> tuple[list[Entity], str | None]:
        page = await self.table.query(
            row_key_prefix=AUDIT_PREFIX, page_size=page_size, continuation=continuation
        )
        return page.entities, page.continuation

    async def expire_audit(self, before: datetime) -> int:
        removed = 0
        async for entity in self.audit_entities():
            processed = entity.get("processed_at")
            if isinstance(processed, datetime) and processed < before:
                await self.table.delete(entity.partition_key, entity.row_key, etag=entity.etag)
                removed += 1
        return removed
