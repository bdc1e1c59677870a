"""Endpoint rows in PostgreSQL (``bus.mode_rows``, migration 2; since migration 3 every row
of every mode, token mode's state, O(m) and audit rows included): one row per (endpoint,
partition, row key), its typed properties as JSON text, and a version drawn from one
sequence, never reused.

The compare-and-swap is Table Storage's: an INSERT that meets the primary key is the 409, an
UPDATE ... WHERE version = expected that matches no row is the 412. A commit writes the rows
and the audit row in one SQL transaction, opened before the handler runs so that its writes
through ``ctx.sql`` land with them or not at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from shared.bus.records import AuditRecord
from shared.bus.state.connection import Pools
from shared.bus.state.damaged import OnDamaged, read_each
from shared.bus.state.postgres import (
    Connection,
    commit_on,
    open_transaction,
    transaction_on,
    translated,
)
from shared.bus.state.properties import decode_properties, encode_properties
from shared.bus.state.rows import (
    EndpointRows,
    RowsTransaction,
    check_sql_key,
    check_writes,
    sql_page_start,
    sql_resume_at,
    where_in_sql,
)
from shared.bus.state.schema import SCHEMA
from shared.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    TransactionFailed,
)
from shared.stores.table import Entity, Insert, TableOperation, normalise_entity

_TABLE = f"{SCHEMA}.mode_rows"


def _entity(row: Any) -> Entity:
    return Entity(
        row["partition_key"],
        row["row_key"],
        decode_properties(row["properties"]),
        str(row["version"]),
    )


def _key(row: Any) -> tuple[str, str]:
    return row["partition_key"], row["row_key"]


def _version(etag: str) -> int:
    """The version an ETag names; -1 (matching no row) for one the bus never handed out."""
    return int(etag) if etag.isdigit() and len(etag) < 19 else -1


def _checked(entity: Entity) -> Entity:
    checked = normalise_entity(entity, table_sizes=False)  # Table Storage's value rules
    check_sql_key("partition key", checked.partition_key)
    check_sql_key("row key", checked.row_key)
    return checked


class PostgresRowsTransaction(RowsTransaction):
    def __init__(self, endpoint: str, connection: Connection, committed: list[bool]) -> None:
        self._endpoint = endpoint
        self._connection = connection
        self._committed = committed

    @property
    def sql(self) -> Connection:
        return self._connection

    async def commit(
        self, operations: Sequence[TableOperation], audit: AuditRecord
    ) -> list[str | None]:
        writes = check_writes(operations)
        rows = [_checked(w.entity) for w in writes]
        etags = [None if isinstance(w, Insert) else w.etag for w in writes]

        async def write() -> list[str | None]:
            versions: list[str | None] = []
            for index, (row, etag) in enumerate(zip(rows, etags, strict=True)):
                versions.append(await self._write(index, row, etag))
            await self._write(len(rows), _checked(audit.to_entity()), None)
            return versions

        versions = await commit_on(self._connection, self._endpoint, write)
        self._committed[0] = True
        return versions

    async def _write(self, index: int, row: Entity, etag: str | None) -> str:
        c, properties = self._connection, encode_properties(row.properties)
        if etag is None:
            version = await c.fetchval(
                f"INSERT INTO {_TABLE} (endpoint, partition_key, row_key, properties, version) "
                f"VALUES ($1, $2, $3, $4, nextval('{SCHEMA}.row_version')) "
                "ON CONFLICT DO NOTHING RETURNING version",
                self._endpoint,
                row.partition_key,
                row.row_key,
                properties,
            )
            if version is None:
                raise TransactionFailed(index, AlreadyExists(f"row {row.row_key!r} exists"))
        else:
            version = await c.fetchval(
                f"UPDATE {_TABLE} SET properties = $4, "
                f"version = nextval('{SCHEMA}.row_version') WHERE endpoint = $1 "
                "AND partition_key = $2 AND row_key = $3 AND version = $5 RETURNING version",
                self._endpoint,
                row.partition_key,
                row.row_key,
                properties,
                _version(etag),
            )
            if version is None:
                raise TransactionFailed(index, PreconditionFailed(f"row {row.row_key!r} changed"))
        return str(version)


class PostgresRows(EndpointRows):
    kind = "sql"

    def __init__(self, endpoint: str, url: str, pools: Pools) -> None:
        self.name = endpoint
        self.url = url
        self._pools = pools

    def where(self, partition_key: str, row_key: str) -> str:
        return where_in_sql(self.name, partition_key, row_key)

    async def read(
        self, partition_key: str, row_keys: Sequence[str], on_damaged: OnDamaged | None = None
    ) -> dict[str, Entity]:
        async def query() -> dict[str, Entity]:
            pool = await self._pools.pool(self.url)
            rows = await pool.fetch(
                f"SELECT partition_key, row_key, properties, version FROM {_TABLE} "
                "WHERE endpoint = $1 AND partition_key = $2 AND row_key = ANY($3::text[])",
                self.name,
                partition_key,
                list(row_keys),
            )
            found = read_each(rows, _entity, _key, self.where, on_damaged)
            return {e.row_key: e for e in found}

        return await translated(f"reading {self.name}/{partition_key}", query)

    async def get(self, partition_key: str, row_key: str) -> Entity:
        found = await self.read(partition_key, [row_key])
        if row_key not in found:
            raise NotFound(f"row {partition_key!r}/{row_key!r} of {self.name} is absent")
        return found[row_key]

    async def insert(self, entity: Entity) -> str:
        row = _checked(entity)

        async def insert() -> str:
            pool = await self._pools.pool(self.url)
            version = await pool.fetchval(
                f"INSERT INTO {_TABLE} (endpoint, partition_key, row_key, properties, version) "
                f"VALUES ($1, $2, $3, $4, nextval('{SCHEMA}.row_version')) "
                "ON CONFLICT DO NOTHING RETURNING version",
                self.name,
                row.partition_key,
                row.row_key,
                encode_properties(row.properties),
            )
            if version is None:
                raise AlreadyExists(f"row {row.partition_key!r}/{row.row_key!r} exists")
            return str(version)

        return await translated(f"inserting {self.name}/{row.partition_key}", insert)

    async def update(self, entity: Entity, etag: str) -> str:
        row = _checked(entity)

        async def update() -> str:
            pool = await self._pools.pool(self.url)
            found = await pool.fetchrow(
                "WITH changed AS ("
                f"  UPDATE {_TABLE} SET properties = $4, "
                f"  version = nextval('{SCHEMA}.row_version') WHERE endpoint = $1 "
                "   AND partition_key = $2 AND row_key = $3 AND version = $5 RETURNING version) "
                "SELECT (SELECT version FROM changed) AS version, "
                f" EXISTS (SELECT 1 FROM {_TABLE} WHERE endpoint = $1 AND partition_key = $2 "
                "   AND row_key = $3) AS present",
                self.name,
                row.partition_key,
                row.row_key,
                encode_properties(row.properties),
                _version(etag),
            )
            if found is None or not found["present"]:
                raise NotFound(f"row {row.partition_key!r}/{row.row_key!r} is gone")
            if found["version"] is None:
                raise PreconditionFailed(f"row {row.partition_key!r}/{row.row_key!r} changed")
            return str(found["version"])

        return await translated(f"updating {self.name}/{row.partition_key}", update)

    async def delete(self, partition_key: str, row_key: str, etag: str | None = None) -> None:
        async def delete() -> None:
            pool = await self._pools.pool(self.url)
            status = await pool.fetchval(
                "WITH gone AS ("
                f"  DELETE FROM {_TABLE} WHERE endpoint = $1 AND partition_key = $2 "
                "   AND row_key = $3 AND ($4 OR version = $5) RETURNING 1) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM gone) THEN 'deleted' "
                f" WHEN EXISTS (SELECT 1 FROM {_TABLE} WHERE endpoint = $1 "
                "   AND partition_key = $2 AND row_key = $3) THEN 'changed' "
                " ELSE 'absent' END",
                self.name,
                partition_key,
                row_key,
                etag is None,
                -1 if etag is None else _version(etag),
            )
            if status == "changed":
                raise PreconditionFailed(f"row {partition_key!r}/{row_key!r} has changed")

        await translated(f"deleting {self.name}/{partition_key}/{row_key}", delete)

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
        start = sql_page_start(continuation, row_key_prefix) or ("", "")

        async def page() -> tuple[list[Entity], str | None]:
            pool = await self._pools.pool(self.url)
            rows = await pool.fetch(
                f"SELECT partition_key, row_key, properties, version FROM {_TABLE} "
                "WHERE endpoint = $1 AND ($2::text IS NULL OR starts_with(row_key, $2)) "
                "AND ($3::text IS NULL OR row_key = $3) "
                "AND (partition_key, row_key) >= ($4, $5) "
                "AND ($7::text IS NULL OR partition_key = $7) "
                "ORDER BY partition_key, row_key LIMIT $6",
                self.name,
                row_key_prefix,
                row_key,
                start[0],
                start[1],
                page_size + 1,
                partition_key,
            )
            found = read_each(rows[:page_size], _entity, _key, self.where, on_damaged)
            following = rows[page_size] if len(rows) > page_size else None
            return found, (
                None
                if following is None
                else sql_resume_at(following["partition_key"], following["row_key"])
            )

        return await translated(f"listing rows of {self.name}", page)

    @contextlib.asynccontextmanager
    async def begin(self, connection: Any = None) -> AsyncIterator[RowsTransaction]:
        opened = (
            open_transaction(self._pools, self.url, self.name)
            if connection is None
            else transaction_on(connection, self.name)
        )
        async with opened as (on, committed):
            yield PostgresRowsTransaction(self.name, on, committed)
