"""An in-memory model of the PostgreSQL store that enforces its rules.

The same rows and conditions as ``shared.bus.state.postgres_rows``: one row per (endpoint,
partition, row key), a version per row drawn from one sequence (so a version is never reused,
even by a row deleted and inserted again), unique keys, and a commit that checks every
condition before it writes anything. Each method does all its checking and writing without
yielding to the event loop, which is what makes it atomic here; the simulator interleaves
copies only between calls.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.bus.records import AuditRecord
from shared.bus.state.base import EndpointState
from shared.bus.state.damaged import OnDamaged
from shared.bus.state.rows import (
    EndpointRows,
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
    """One database: every endpoint's rows, keyed by endpoint as the SQL table is."""

    rows: dict[tuple[str, str, str], Entity] = field(default_factory=dict)
    """Every endpoint's rows (``shared.bus.state.rows``), by endpoint, partition and row."""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def next_version(self) -> str:
        return str(next(self._versions))

    async def close(self) -> None:
        """Nothing to release: the rows live as long as the object."""

    def endpoint_rows(self, endpoint: str) -> EndpointRows:
        return MemorySqlRows(self, endpoint)

    def endpoint_state(self, endpoint: str) -> EndpointState:
        return EndpointState(self.endpoint_rows(endpoint))


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
        rows = [normalise_entity(w.entity, table_sizes=False) for w in writes]
        for index, (write, row) in enumerate(zip(writes, rows, strict=True)):
            check_sql_key("partition key", row.partition_key)
            check_sql_key("row key", row.row_key)
            stored = db.rows.get((name, row.partition_key, row.row_key))
            if isinstance(write, Insert) and stored is not None:
                raise TransactionFailed(index, AlreadyExists(f"row {row.row_key!r} exists"))
            if not isinstance(write, Insert) and (stored is None or stored.etag != write.etag):
                raise TransactionFailed(index, PreconditionFailed(f"row {row.row_key!r} changed"))
        audit_entity = audit.to_entity()
        audit_key = (name, audit_entity.partition_key, audit_entity.row_key)
        if audit_key in db.rows:
            raise TransactionFailed(
                len(writes), AlreadyExists(f"audit row of {audit.message_id} exists")
            )
        versions: list[str | None] = []
        for row in rows:
            version = db.next_version()
            db.rows[(name, row.partition_key, row.row_key)] = replace(row, etag=version)
            versions.append(version)
        db.rows[audit_key] = replace(
            normalise_entity(audit_entity, table_sizes=False), etag=db.next_version()
        )
        return versions


class MemorySqlRows(EndpointRows):
    """An endpoint's rows in the model: one row per key, versions from the sequence."""

    kind = "sql"

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

    async def insert(self, entity: Entity) -> str:
        row = normalise_entity(entity, table_sizes=False)
        check_sql_key("partition key", row.partition_key)
        check_sql_key("row key", row.row_key)
        key = (self.name, row.partition_key, row.row_key)
        if key in self.db.rows:
            raise AlreadyExists(f"row {row.partition_key!r}/{row.row_key!r} exists")
        version = self.db.next_version()
        self.db.rows[key] = replace(row, etag=version)
        return version

    async def update(self, entity: Entity, etag: str) -> str:
        row = normalise_entity(entity, table_sizes=False)
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
        partition_key: str | None = None,
    ) -> tuple[list[Entity], str | None]:
        # The model keeps typed properties, not their JSON text: what can be damaged in it
        # is their values, which the modes judge row by row as on the server.
        start = sql_page_start(continuation, row_key_prefix)
        keys = sorted(
            k[1:]
            for k in self.db.rows
            if k[0] == self.name
            and (row_key_prefix is None or k[2].startswith(row_key_prefix))
            and (row_key is None or k[2] == row_key)
            and (partition_key is None or k[1] == partition_key)
            and (start is None or k[1:] >= start)
        )
        page = [self.db.rows[(self.name, *k)] for k in keys[:page_size]]
        following = keys[page_size] if len(keys) > page_size else None
        return page, (None if following is None else sql_resume_at(*following))

    @contextlib.asynccontextmanager
    async def begin(self, connection: Any = None) -> AsyncIterator[RowsTransaction]:
        transaction = MemorySqlRowsTransaction(self)
        try:
            yield transaction
        finally:
            transaction.done = True  # nothing was written unless commit ran
