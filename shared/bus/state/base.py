"""Token mode's rows, typed over the endpoint's rows (``shared.bus.state.rows``).

One class for every store: the state row, O(m) and the audit rows are entities of
``EndpointRows`` (``STATE_ROW``, ``outbox_row``, ``audit_row`` in ``shared.bus.records``), so
what is promised here follows from the rows' contract (``tests/contract/
test_endpoint_rows_contract.py`` runs both on every store):

- ``read`` returns the partition's state row and O(m) as of one moment (one query, R2).
- ``insert_outbox`` creates O(m) only if absent (a unique key); ``AlreadyExists`` otherwise.
- ``delete_outbox`` removes O(m) only while its version is the one given (the pipeline drops
  an unused O(m) with it; the cleanup retires committed ones with it).
- A ``StateTransaction`` commits the state (inserted if it was absent, else only while its
  version is unchanged), O(m) (only while its version is unchanged) and the audit row (only if
  absent) all or nothing; when one condition fails nothing is written and
  ``TransactionFailed`` is raised. ``OutcomeUnknown`` means the commit may or may not have
  landed. A handler's own writes through ``StateTransaction.sql`` (PostgreSQL) belong to the
  same transaction: they land with the bus's rows or not at all.

Versions are opaque strings: the ETag on Table Storage, the version column in PostgreSQL.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from shared.bus.records import (
    AUDIT_PREFIX,
    OUTBOX_PREFIX,
    STATE_ROW,
    AuditRecord,
    OutboxRecord,
    outbox_row,
)
from shared.bus.state.damaged import OnDamaged, read_each
from shared.bus.state.rows import EndpointRows, RowsTransaction
from shared.stores.table import Entity, Insert, TableOperation, Update

StoreKind = Literal["table", "postgres", "cosmos", "blob"]
STORES: tuple[StoreKind, ...] = ("table", "postgres", "cosmos", "blob")


@dataclass(frozen=True)
class StateRow:
    """A partition's business state as stored: its type name, JSON and version."""

    partition_key: str
    type: str
    data: str
    version: str


def state_row(entity: Entity) -> StateRow:
    return StateRow(
        entity.partition_key, str(entity.get("type", "")), str(entity["data"]), entity.etag
    )


@dataclass(frozen=True)
class Snapshot:
    """R2's answer: what exists now of the partition's state and this message's O(m)."""

    state: StateRow | None
    outbox: OutboxRecord | None


@dataclass(frozen=True)
class StateWrite:
    """The state a commit writes, and the version it replaces (None: insert, must be absent)."""

    partition_key: str
    type: str
    data: str
    expected: str | None


class StateTransaction:
    """One open unit of work, from before the handler runs to the commit."""

    def __init__(self, rows: RowsTransaction) -> None:
        self._rows = rows

    @property
    def sql(self) -> Any:
        """The open database connection a handler may write its own tables with (PostgreSQL);
        None where the store has no such transaction (Table Storage)."""
        return self._rows.sql

    async def commit(
        self, state: StateWrite | None, outbox: OutboxRecord, audit: AuditRecord
    ) -> str:
        """Write state, the committed O(m) (guarded by ``outbox.etag``) and the audit row in
        one transaction and end it; ``state`` None leaves the state row as it is (a message
        that changes nothing of it, such as a cancellation). Returns O(m)'s new version.
        Raises TransactionFailed (nothing written; index 0 the state, 1 O(m), 2 the audit
        row; without a state write, 0 O(m) and 1 the audit row) or OutcomeUnknown."""
        operations: list[TableOperation] = [] if state is None else [_state_operation(state)]
        operations.append(Update(outbox.to_entity(), etag=outbox.etag))
        etags = await self._rows.commit(operations, audit)
        return etags[-1] or ""


def state_entity(state: StateWrite) -> Entity:
    """The state row ``state`` writes."""
    return Entity(state.partition_key, STATE_ROW, {"type": state.type, "data": state.data})


def _state_operation(state: StateWrite) -> TableOperation:
    entity = state_entity(state)
    return Insert(entity) if state.expected is None else Update(entity, state.expected)


class EndpointState:
    """One endpoint's token-mode rows, over its ``EndpointRows`` in whichever store."""

    def __init__(self, rows: EndpointRows) -> None:
        self._rows = rows
        self.name = rows.name
        self.kind = rows.kind

    async def read(self, partition_key: str, message_id: str) -> Snapshot:
        """The state row and O(m) of ``partition_key`` in one query."""
        rows = await self._rows.read(partition_key, [STATE_ROW, outbox_row(message_id)])
        state = rows.get(STATE_ROW)
        outbox = rows.get(outbox_row(message_id))
        return Snapshot(
            None if state is None else state_row(state),
            None if outbox is None else OutboxRecord.from_entity(outbox),
        )

    async def insert_outbox(self, record: OutboxRecord) -> str:
        """Create O(m); returns its version. AlreadyExists if it exists."""
        return await self._rows.insert(record.to_entity())

    async def delete_outbox(self, record: OutboxRecord) -> None:
        """Delete O(m) while its version is ``record.etag`` (PreconditionFailed if changed;
        nothing to do if it is gone)."""
        await self._rows.delete(
            record.partition_key, outbox_row(record.message_id), etag=record.etag
        )

    async def fence_outbox(self, record: OutboxRecord) -> OutboxRecord:
        """Rewrite O(m) unchanged under a new version, while its version is ``record.etag``
        (PreconditionFailed if changed, NotFound if gone): a round that read the old version
        can no longer commit through it (the cleanup does this before deleting a token)."""
        return replace(record, etag=await self._rows.update(record.to_entity(), etag=record.etag))

    async def outbox_page(
        self, continuation: str | None, page_size: int, on_damaged: OnDamaged | None = None
    ) -> tuple[list[OutboxRecord], str | None]:
        """One page of O(m) records in key order and where the next starts (None: done). A
        record that cannot be read is handed to ``on_damaged`` and left out of the page, which
        goes on after it (raised where there is no ``on_damaged``: ``shared.bus.state.damaged``).
        """
        page, following = await self._rows.page(
            row_key_prefix=OUTBOX_PREFIX,
            page_size=page_size,
            continuation=continuation,
            on_damaged=on_damaged,
        )
        records = read_each(
            page,
            OutboxRecord.from_entity,
            lambda e: (e.partition_key, e.row_key),
            self._rows.where,
            on_damaged,
        )
        return records, following

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[StateTransaction]:
        """Open a unit of work. Leaving it without ``commit`` rolls everything back."""
        async with self._rows.begin() as transaction:
            yield StateTransaction(transaction)

    def rows(self) -> EndpointRows:
        """The endpoint's rows, every mode's (``shared.bus.state.rows``)."""
        return self._rows

    async def states(self) -> AsyncIterator[StateRow]:
        """Every partition's state row, whichever mode wrote it (for tools and tests)."""
        async for entity in self._rows.every(row_key=STATE_ROW):
            yield state_row(entity)

    async def outbox_records(self) -> AsyncIterator[OutboxRecord]:
        """Every O(m) of the endpoint, page by page (for tools and tests)."""
        continuation: str | None = None
        while True:
            page, continuation = await self.outbox_page(continuation, 1000)
            for record in page:
                yield record
            if continuation is None:
                return

    async def audit_page(
        self, continuation: str | None, page_size: int
    ) -> tuple[list[Entity], str | None]:
        """One page of audit rows in key order and where the next page starts (None: done).
        For ``bus-audit export``."""
        return await self._rows.page(
            row_key_prefix=AUDIT_PREFIX, page_size=page_size, continuation=continuation
        )

    async def audit_entities(self) -> AsyncIterator[Entity]:
        """Every audit row, page by page."""
        async for entity in self._rows.every(row_key_prefix=AUDIT_PREFIX):
            yield entity

    async def expire_audit(self, before: datetime, on_damaged: OnDamaged | None = None) -> int:
        """Delete audit rows processed before ``before``; returns how many."""
        return await self._rows.expire_audit(before, on_damaged)
