"""An in-memory model of the PostgreSQL store that enforces its rules.

The same rows and conditions as ``shared.bus.state.postgres``: a version per row drawn from one
sequence (so a version is never reused, even by a row deleted and inserted again), unique keys
for O(m) and the audit row, and a commit that checks every condition before it writes anything.
Each method does all its checking and writing without yielding to the event loop, which is
what makes it atomic here; the simulator interleaves copies only between calls.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from shared.bus.records import STATE_ROW, AuditRecord, OutboxRecord
from shared.bus.state.base import (
    EndpointState,
    Snapshot,
    StateRow,
    StateTransaction,
    StateWrite,
    next_page,
    page_after,
)
from shared.bus.state.damaged import OnDamaged
from shared.bus.state.rows import (
    ModeRows,
    RowsTransaction,
    check_sql_key,
    check_writes,
    sql_page_start,
    sql_resume_at,
    where_in_sql,
)
from shared.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    TransactionFailed,
)
from shared.stores.table import Entity, Insert, TableOperation, normalise_entity


@dataclass
class MemorySqlDatabase:
    """One database: every endpoint's rows, keyed by endpoint as the SQL tables are."""

    states: dict[tuple[str, str], StateRow] = field(default_factory=dict)
    outboxes: dict[tuple[str, str, str], OutboxRecord] = field(default_factory=dict)
    audits: dict[tuple[str, str, str], Entity] = field(default_factory=dict)
    rows: dict[tuple[str, str, str], Entity] = field(default_factory=dict)
    """The window modes' rows (``shared.bus.state.rows``), by endpoint, partition and row."""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _endpoints: dict[str, MemorySqlState] = field(default_factory=dict)

    def next_version(self) -> str:
        return str(next(self._versions))

    async def close(self) -> None:
        """Nothing to release: the rows live as long as the object."""

    def endpoint_state(self, endpoint: str) -> EndpointState:
        store = self._endpoints.get(endpoint)
        if store is None:
            store = self._endpoints[endpoint] = MemorySqlState(self, endpoint)
        return store


def _audit_key(endpoint: str, audit: AuditRecord) -> tuple[str, str, str]:
    return (endpoint, audit.partition_key, audit.message_id)


def state_of(entity: Entity) -> StateRow:
    """A window mode's state row as the state listing shows it."""
    return StateRow(
        entity.partition_key, str(entity.get("type", "")), str(entity.get("data", "")), entity.etag
    )


class MemorySqlTransaction(StateTransaction):
    def __init__(self, store: MemorySqlState) -> None:
        self._store = store
        self.done = False

    async def commit(self, state: StateWrite, outbox: OutboxRecord, audit: AuditRecord) -> str:
        if self.done:
            # A COMMIT travels on the transaction's connection ahead of its ROLLBACK, so one
            # whose answer was lost either landed before the rollback or never lands.
            raise TransactionFailed(0, PreconditionFailed("the transaction has ended"))
        self.done = True
        db, name = self._store.db, self._store.name
        state_key = (name, state.partition_key)
        outbox_key = (name, outbox.partition_key, outbox.message_id)
        audit_key = _audit_key(name, audit)
        current = db.states.get(state_key)
        if state.expected is None and current is not None:
            raise TransactionFailed(0, AlreadyExists(f"state of {state.partition_key!r} exists"))
        if state.expected is not None and (current is None or current.version != state.expected):
            raise TransactionFailed(0, PreconditionFailed("the state has changed"))
        stored = db.outboxes.get(outbox_key)
        if stored is None or stored.etag != outbox.etag:
            raise TransactionFailed(1, PreconditionFailed(f"O({outbox.message_id}) has changed"))
        if audit_key in db.audits:
            raise TransactionFailed(2, AlreadyExists(f"audit row of {audit.message_id} exists"))
        db.states[state_key] = StateRow(
            state.partition_key, state.type, state.data, db.next_version()
        )
        version = db.next_version()
        db.outboxes[outbox_key] = replace(outbox, etag=version)
        db.audits[audit_key] = replace(audit.to_entity(), etag=db.next_version())
        return version


class MemorySqlState(EndpointState):
    kind = "sql"

    def __init__(self, db: MemorySqlDatabase, endpoint: str) -> None:
        self.db = db
        self.name = endpoint

    def where_outbox(self, partition_key: str, message_id: str) -> str:
        return where_in_sql(self.name, partition_key, message_id, "outbox")

    async def read(self, partition_key: str, message_id: str) -> Snapshot:
        return Snapshot(
            self.db.states.get((self.name, partition_key)),
            self.db.outboxes.get((self.name, partition_key, message_id)),
        )

    async def insert_outbox(self, record: OutboxRecord) -> str:
        check_sql_key("partition key", record.partition_key)
        key = (self.name, record.partition_key, record.message_id)
        if key in self.db.outboxes:
            raise AlreadyExists(f"O({record.message_id}) exists")
        version = self.db.next_version()
        self.db.outboxes[key] = replace(record, etag=version)
        return version

    async def delete_outbox(self, record: OutboxRecord) -> None:
        key = (self.name, record.partition_key, record.message_id)
        stored = self.db.outboxes.get(key)
        if stored is None:
            return
        if stored.etag != record.etag:
            raise PreconditionFailed(f"O({record.message_id}) has changed")
        del self.db.outboxes[key]

    async def fence_outbox(self, record: OutboxRecord) -> OutboxRecord:
        key = (self.name, record.partition_key, record.message_id)
        stored = self.db.outboxes.get(key)
        if stored is None:
            raise NotFound(f"O({record.message_id}) is gone")
        if stored.etag != record.etag:
            raise PreconditionFailed(f"O({record.message_id}) has changed")
        fenced = self.db.outboxes[key] = replace(stored, etag=self.db.next_version())
        return fenced

    async def outbox_page(
        self, continuation: str | None, page_size: int, on_damaged: OnDamaged | None = None
    ) -> tuple[list[OutboxRecord], str | None]:
        # The model keeps O(m) as records, not as columns: its rows are never damaged (the
        # schema's types and CHECK hold them; what else can be damaged is shown on the server).
        after = page_after(continuation)
        keys = sorted(
            k for k in self.db.outboxes if k[0] == self.name and (after is None or k[1:] > after)
        )
        page = [self.db.outboxes[k] for k in keys[:page_size]]
        return page, (next_page(page[-1]) if len(keys) > page_size else None)

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[StateTransaction]:
        transaction = MemorySqlTransaction(self)
        try:
            yield transaction
        finally:
            transaction.done = True  # nothing was written unless commit ran

    def rows(self) -> ModeRows:
        return MemorySqlRows(self.db, self.name)

    async def states(self) -> AsyncIterator[StateRow]:
        rows = dict((key, row) for key, row in self.db.states.items() if key[0] == self.name)
        for (endpoint, partition, row_key), entity in self.db.rows.items():
            if endpoint == self.name and row_key == STATE_ROW:
                rows[(endpoint, partition)] = state_of(entity)
        for _, row in sorted(rows.items()):
            yield row

    async def audit_page(
        self, continuation: str | None, page_size: int
    ) -> tuple[list[Entity], str | None]:
        after = page_after(continuation)
        keys = sorted(
            k for k in self.db.audits if k[0] == self.name and (after is None or k[1:] > after)
        )
        page = [self.db.audits[k] for k in keys[:page_size]]
        return page, (next_page(page[-1]) if len(keys) > page_size else None)

    async def expire_audit(self, before: Any) -> int:
        expired = [
            key
            for key, entity in self.db.audits.items()
            if key[0] == self.name
            and isinstance(at := entity.get("processed_at"), datetime)
            and at < before
        ]
        for key in expired:
            del self.db.audits[key]
        return len(expired)


class MemorySqlRowsTransaction(RowsTransaction):
    def __init__(self, store: MemorySqlRows) -> None:
        self._store = store
        self.done = False

    async def commit(
        self, operations: Sequence[TableOperation], audit: AuditRecord
    ) -> list[str | None]:
        if self.done:
            raise TransactionFailed(0, PreconditionFailed("the transaction has ended"))
        self.done = True
        writes = check_writes(operations)
        db, name = self._store.db, self._store.name
        rows = [normalise_entity(w.entity) for w in writes]
        for index, (write, row) in enumerate(zip(writes, rows, strict=True)):
            check_sql_key("partition key", row.partition_key)
            check_sql_key("row key", row.row_key)
            stored = db.rows.get((name, row.partition_key, row.row_key))
            if isinstance(write, Insert) and stored is not None:
                raise TransactionFailed(index, AlreadyExists(f"row {row.row_key!r} exists"))
            if not isinstance(write, Insert) and (stored is None or stored.etag != write.etag):
                raise TransactionFailed(index, PreconditionFailed(f"row {row.row_key!r} changed"))
        if _audit_key(name, audit) in db.audits:
            raise TransactionFailed(
                len(writes), AlreadyExists(f"audit row of {audit.message_id} exists")
            )
        versions: list[str | None] = []
        for row in rows:
            version = db.next_version()
            db.rows[(name, row.partition_key, row.row_key)] = replace(row, etag=version)
            versions.append(version)
        db.audits[_audit_key(name, audit)] = replace(audit.to_entity(), etag=db.next_version())
        return versions


class MemorySqlRows(ModeRows):
    """The window modes' rows in the model: one row per key, versions from the sequence."""

    def __init__(self, db: MemorySqlDatabase, endpoint: str) -> None:
        self.db = db
        self.name = endpoint

    def where(self, partition_key: str, row_key: str) -> str:
        return where_in_sql(self.name, partition_key, row_key)

    async def read(
        self, partition_key: str, row_keys: Sequence[str], on_damaged: OnDamaged | None = None
    ) -> dict[str, Entity]:
        found = (self.db.rows.get((self.name, partition_key, k)) for k in row_keys)
        return {e.row_key: e for e in found if e is not None}

    async def get(self, partition_key: str, row_key: str) -> Entity:
        row = self.db.rows.get((self.name, partition_key, row_key))
        if row is None:
            raise NotFound(f"row {partition_key!r}/{row_key!r} of {self.name} is absent")
        return row

    async def update(self, entity: Entity, etag: str) -> str:
        row = normalise_entity(entity)
        key = (self.name, row.partition_key, row.row_key)
        stored = self.db.rows.get(key)
        if stored is None:
            raise NotFound(f"row {row.partition_key!r}/{row.row_key!r} is gone")
        if stored.etag != etag:
            raise PreconditionFailed(f"row {row.partition_key!r}/{row.row_key!r} has changed")
        version = self.db.next_version()
        self.db.rows[key] = replace(row, etag=version)
        return version

    async def delete(self, partition_key: str, row_key: str, etag: str | None = None) -> None:
        key = (self.name, partition_key, row_key)
        stored = self.db.rows.get(key)
        if stored is None:
            return
        if etag is not None and stored.etag != etag:
            raise PreconditionFailed(f"row {partition_key!r}/{row_key!r} has changed")
        del self.db.rows[key]

    async def page(
        self,
        *,
        row_key_prefix: str | None = None,
        row_key: str | None = None,
        page_size: int,
        continuation: str | None = None,
        on_damaged: OnDamaged | None = None,
    ) -> tuple[list[Entity], str | None]:
        # The model keeps typed properties, not their JSON text: what can be damaged in it
        # is their values, which the modes judge row by row as on the server.
        start = sql_page_start(continuation)
        keys = sorted(
            k[1:]
            for k in self.db.rows
            if k[0] == self.name
            and (row_key_prefix is None or k[2].startswith(row_key_prefix))
            and (row_key is None or k[2] == row_key)
            and (start is None or k[1:] >= start)
        )
        page = [self.db.rows[(self.name, *k)] for k in keys[:page_size]]
        following = keys[page_size] if len(keys) > page_size else None
        return page, (None if following is None else sql_resume_at(*following))

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[RowsTransaction]:
        transaction = MemorySqlRowsTransaction(self)
        try:
            yield transaction
        finally:
            transaction.done = True  # nothing was written unless commit ran
