"""Endpoint state in PostgreSQL (asyncpg): the state, O(m) and audit rows of every endpoint in
the ``bus`` schema (``shared.bus.state.schema``), one SQL transaction per commit.

The compare-and-swap is the same as on Table Storage: a row's version (drawn from one
sequence, never reused) stands in for the ETag, an UPDATE ... WHERE version = expected that
matches no row is the 412, and the primary keys of O(m) and the audit row are the 409s. The
transaction opens before the handler runs, so a handler's own writes through ``ctx.sql`` land
with the bus's rows or not at all.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from shared.bus.records import STATE_ROW, AuditRecord, OutboxRecord, OutgoingSignal, audit_row
from shared.bus.state.base import (
    EndpointState,
    Snapshot,
    StateRow,
    StateTransaction,
    StateWrite,
    page_after,
    resume_after,
)
from shared.bus.state.connection import Pools
from shared.bus.state.damaged import OnDamaged, read_each
from shared.bus.state.rows import ModeRows, where_in_sql
from shared.bus.state.schema import SCHEMA
from shared.errors import (
    AlreadyExists,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    TransactionFailed,
)
from shared.stores.table import Entity

T = TypeVar("T")
_Row = TypeVar("_Row", OutboxRecord, Entity)
Connection = asyncpg.Connection | PoolConnectionProxy

# Errors after which nobody knows whether the server applied the request.
_UNKNOWN = (OSError, TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)
# A concurrent transaction won: retry from the read, as after a 412.
_LOST_RACE = (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)

_AUDIT_COLUMNS = (
    "partition_key, message_id, message_type, source, correlation_id, causation_id, sent_at, "
    "processed_at, mode, caused::text AS caused"
)
_OUTBOX_COLUMNS = (
    "partition_key, message_id, claim, status, incoming_token, started_at, committed_at, "
    "outgoing::text AS outgoing, abandoned::text AS abandoned, version"
)


def _schema_missing(error: Exception) -> NotFound:
    return NotFound(f"the bus schema is missing ({error}): run `bus provision`")


async def translated(what: str, call: Callable[[], Awaitable[T]]) -> T:
    with _translating(what):
        return await call()


@contextlib.contextmanager
def _translating(what: str) -> Iterator[None]:
    """asyncpg's errors as the project's, at this adapter's edge."""
    try:
        yield
    except asyncpg.UniqueViolationError as e:
        raise AlreadyExists(f"{what}: {e}") from e
    except asyncpg.UndefinedTableError as e:
        raise _schema_missing(e) from e
    except _UNKNOWN as e:
        raise OutcomeUnknown(f"{what}: PostgreSQL did not answer: {e}") from e
    except asyncpg.PostgresError as e:
        raise StorageError(f"{what}: {type(e).__name__}: {e}") from e


def _outbox(record: Any) -> OutboxRecord:
    return OutboxRecord(
        partition_key=record["partition_key"],
        message_id=record["message_id"],
        claim=record["claim"],
        incoming_token=record["incoming_token"],
        started_at=record["started_at"],
        status="committed" if record["status"] == "committed" else "claimed",
        committed_at=record["committed_at"],
        outgoing=tuple(OutgoingSignal.model_validate(o) for o in json.loads(record["outgoing"])),
        abandoned=tuple(json.loads(record["abandoned"])),
        etag=str(record["version"]),
    )


def _json_outgoing(record: OutboxRecord) -> str:
    return json.dumps([o.model_dump() for o in record.outgoing])


async def commit_on(connection: Connection, endpoint: str, write: Callable[[], Awaitable[T]]) -> T:
    """Run ``write`` (the transaction's statements) and COMMIT, with asyncpg's errors as the
    commit's: a lost race or a lost connection before COMMIT is TransactionFailed (nothing
    landed), no answer to COMMIT itself is OutcomeUnknown."""
    try:
        result = await write()
    except _LOST_RACE as e:
        raise TransactionFailed(0, PreconditionFailed(f"concurrent commit: {e}")) from e
    except _UNKNOWN as e:
        # Not committed yet: the server rolls back a transaction whose client is gone.
        raise TransactionFailed(0, PreconditionFailed(f"connection lost: {e}")) from e
    except asyncpg.PostgresError as e:
        raise StorageError(f"commit at {endpoint}: {type(e).__name__}: {e}") from e
    try:
        await connection.execute("COMMIT")
    except _UNKNOWN as e:
        raise OutcomeUnknown(f"COMMIT at {endpoint}: no answer: {e}") from e
    except _LOST_RACE as e:
        raise TransactionFailed(0, PreconditionFailed(f"concurrent commit: {e}")) from e
    return result


async def insert_audit(c: Connection, endpoint: str, audit: AuditRecord, *, index: int) -> None:
    """Insert the audit row inside the open transaction; TransactionFailed(``index``) if the
    message has one already."""
    inserted = await c.fetchval(
        f"INSERT INTO {SCHEMA}.audit (endpoint, partition_key, message_id, message_type, "
        "source, correlation_id, causation_id, sent_at, processed_at, mode, caused) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb) "
        "ON CONFLICT DO NOTHING RETURNING 1",
        endpoint,
        audit.partition_key,
        audit.message_id,
        audit.message_type,
        audit.source,
        audit.correlation_id,
        audit.causation_id or "",
        audit.sent_at,
        audit.processed_at,
        audit.mode,
        json.dumps(audit.caused),
    )
    if inserted is None:
        raise TransactionFailed(index, AlreadyExists(f"audit row of {audit.message_id} exists"))


@contextlib.asynccontextmanager
async def open_transaction(
    pools: Pools, url: str, endpoint: str
) -> AsyncIterator[tuple[Connection, list[bool]]]:
    """A pooled connection inside BEGIN, and a flag the caller sets once it has committed;
    otherwise leaving rolls back."""
    pool = await translated(f"connecting for {endpoint}", lambda: pools.pool(url))
    connection = await translated(f"connecting for {endpoint}", pool.acquire)
    committed = [False]
    try:
        await translated(f"BEGIN at {endpoint}", lambda: connection.execute("BEGIN"))
        yield connection, committed
    finally:
        if not committed[0]:
            with contextlib.suppress(*_UNKNOWN, asyncpg.PostgresError):
                await connection.execute("ROLLBACK")
        await pool.release(connection)


class PostgresTransaction(StateTransaction):
    def __init__(self, endpoint: str, connection: Connection, committed: list[bool]) -> None:
        self._endpoint = endpoint
        self._connection = connection
        self._committed = committed

    @property
    def sql(self) -> Connection:
        return self._connection

    async def commit(self, state: StateWrite, outbox: OutboxRecord, audit: AuditRecord) -> str:
        version = await commit_on(
            self._connection, self._endpoint, lambda: self._write(state, outbox, audit)
        )
        self._committed[0] = True
        return version

    async def _write(self, state: StateWrite, outbox: OutboxRecord, audit: AuditRecord) -> str:
        c, e = self._connection, self._endpoint
        if state.expected is None:
            row = await c.fetchval(
                f"INSERT INTO {SCHEMA}.state (endpoint, partition_key, type, data, version) "
                f"VALUES ($1, $2, $3, $4::jsonb, nextval('{SCHEMA}.row_version')) "
                "ON CONFLICT DO NOTHING RETURNING version",
                e,
                state.partition_key,
                state.type,
                state.data,
            )
            if row is None:
                raise TransactionFailed(0, AlreadyExists("the state row exists"))
        else:
            row = await c.fetchval(
                f"UPDATE {SCHEMA}.state SET type = $3, data = $4::jsonb, "
                f"version = nextval('{SCHEMA}.row_version') "
                "WHERE endpoint = $1 AND partition_key = $2 AND version = $5 RETURNING version",
                e,
                state.partition_key,
                state.type,
                state.data,
                int(state.expected),
            )
            if row is None:
                raise TransactionFailed(0, PreconditionFailed("the state has changed"))
        version = await c.fetchval(
            f"UPDATE {SCHEMA}.outbox SET status = $4, committed_at = $5, "
            f"outgoing = $6::jsonb, abandoned = $7::jsonb, "
            f"version = nextval('{SCHEMA}.row_version') "
            "WHERE endpoint = $1 AND partition_key = $2 AND message_id = $3 AND version = $8 "
            "RETURNING version",
            e,
            outbox.partition_key,
            outbox.message_id,
            outbox.status,
            outbox.committed_at,
            _json_outgoing(outbox),
            json.dumps(list(outbox.abandoned)),
            int(outbox.etag),
        )
        if version is None:
            raise TransactionFailed(1, PreconditionFailed(f"O({outbox.message_id}) has changed"))
        await insert_audit(c, e, audit, index=2)
        return str(version)


class PostgresEndpointState(EndpointState):
    kind = "sql"

    def __init__(self, endpoint: str, url: str, pools: Pools) -> None:
        self.name = endpoint
        self.url = url
        self._pools = pools

    async def _pool(self) -> asyncpg.Pool:
        return await self._pools.pool(self.url)

    async def read(self, partition_key: str, message_id: str) -> Snapshot:
        async def query() -> Snapshot:
            pool = await self._pool()
            # One statement, so both rows are read from one snapshot.
            rows = await pool.fetch(
                f"SELECT 's' AS kind, partition_key, type, data::text AS data, version, "
                "NULL AS message_id, NULL AS claim, NULL AS status, NULL AS incoming_token, "
                "NULL::timestamptz AS started_at, NULL::timestamptz AS committed_at, "
                "NULL AS outgoing, NULL AS abandoned "
                f"FROM {SCHEMA}.state WHERE endpoint = $1 AND partition_key = $2 "
                "UNION ALL "
                "SELECT 'o', partition_key, NULL, NULL, version, message_id, claim, status, "
                "incoming_token, started_at, committed_at, outgoing::text, abandoned::text "
                f"FROM {SCHEMA}.outbox "
                "WHERE endpoint = $1 AND partition_key = $2 AND message_id = $3",
                self.name,
                partition_key,
                message_id,
            )
            state: StateRow | None = None
            outbox: OutboxRecord | None = None
            for row in rows:
                if row["kind"] == "s":
                    state = StateRow(
                        row["partition_key"], row["type"], row["data"], str(row["version"])
                    )
                else:
                    outbox = _outbox(row)
            return Snapshot(state, outbox)

        return await translated(f"reading {self.name}/{partition_key}", query)

    async def insert_outbox(self, record: OutboxRecord) -> str:
        async def insert() -> str:
            pool = await self._pool()
            version = await pool.fetchval(
                f"INSERT INTO {SCHEMA}.outbox (endpoint, partition_key, message_id, claim, "
                "status, incoming_token, started_at, committed_at, outgoing, abandoned, version) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, "
                f"nextval('{SCHEMA}.row_version')) RETURNING version",
                self.name,
                record.partition_key,
                record.message_id,
                record.claim,
                record.status,
                record.incoming_token,
                record.started_at,
                record.committed_at,
                _json_outgoing(record),
                json.dumps(list(record.abandoned)),
            )
            return str(version)

        return await translated(f"inserting O({record.message_id}) at {self.name}", insert)

    async def delete_outbox(self, record: OutboxRecord) -> None:
        async def delete() -> None:
            pool = await self._pool()
            status = await pool.fetchval(
                "WITH gone AS ("
                f"  DELETE FROM {SCHEMA}.outbox WHERE endpoint = $1 AND partition_key = $2 "
                "   AND message_id = $3 AND version = $4 RETURNING 1) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM gone) THEN 'deleted' "
                f" WHEN EXISTS (SELECT 1 FROM {SCHEMA}.outbox WHERE endpoint = $1 "
                "   AND partition_key = $2 AND message_id = $3) THEN 'changed' "
                " ELSE 'absent' END",
                self.name,
                record.partition_key,
                record.message_id,
                int(record.etag),
            )
            if status == "changed":
                raise PreconditionFailed(f"O({record.message_id}) has changed")

        await translated(f"deleting O({record.message_id}) at {self.name}", delete)

    async def fence_outbox(self, record: OutboxRecord) -> OutboxRecord:
        async def fence() -> OutboxRecord:
            pool = await self._pool()
            row = await pool.fetchrow(
                "WITH fenced AS ("
                f"  UPDATE {SCHEMA}.outbox SET version = nextval('{SCHEMA}.row_version') "
                "   WHERE endpoint = $1 AND partition_key = $2 AND message_id = $3 "
                "   AND version = $4 RETURNING version) "
                "SELECT (SELECT version FROM fenced) AS fenced, "
                f" EXISTS (SELECT 1 FROM {SCHEMA}.outbox WHERE endpoint = $1 "
                "   AND partition_key = $2 AND message_id = $3) AS present",
                self.name,
                record.partition_key,
                record.message_id,
                int(record.etag),
            )
            if row is None or not row["present"]:
                raise NotFound(f"O({record.message_id}) is gone")
            if row["fenced"] is None:
                raise PreconditionFailed(f"O({record.message_id}) has changed")
            return replace(record, etag=str(row["fenced"]))

        return await translated(f"fencing O({record.message_id}) at {self.name}", fence)

    async def outbox_page(
        self, continuation: str | None, page_size: int, on_damaged: OnDamaged | None = None
    ) -> tuple[list[OutboxRecord], str | None]:
        return await self._keyset_page(
            "outbox", _OUTBOX_COLUMNS, _outbox, continuation, page_size, "O(m)", on_damaged
        )

    def where_outbox(self, partition_key: str, message_id: str) -> str:
        return where_in_sql(self.name, partition_key, message_id, "outbox")

    async def _keyset_page(
        self,
        table: str,
        columns: str,
        convert: Callable[[Any], _Row],
        continuation: str | None,
        page_size: int,
        what: str,
        on_damaged: OnDamaged | None = None,
    ) -> tuple[list[_Row], str | None]:
        """One page of this endpoint's rows of ``table`` in key order, after the key that
        ``continuation`` holds; one row more is asked for to know whether another page exists.
        A row ``convert`` cannot read goes to ``on_damaged``; the page still ends at its key."""
        after = page_after(continuation) or ("", "")

        async def page() -> tuple[list[_Row], str | None]:
            pool = await self._pool()
            rows = await pool.fetch(
                f"SELECT {columns} FROM {SCHEMA}.{table} WHERE endpoint = $1 "
                "AND ($2 OR (partition_key, message_id) > ($3, $4)) "
                "ORDER BY partition_key, message_id LIMIT $5",
                self.name,
                continuation is None,
                after[0],
                after[1],
                page_size + 1,
            )
            found = read_each(
                rows[:page_size],
                convert,
                lambda r: (r["partition_key"], r["message_id"]),
                lambda partition_key, key: where_in_sql(self.name, partition_key, key, table),
                on_damaged,
            )
            if len(rows) <= page_size:
                return found, None
            last = rows[page_size - 1]
            return found, resume_after(last["partition_key"], last["message_id"])

        return await translated(f"listing {what} of {self.name}", page)

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[StateTransaction]:
        async with open_transaction(self._pools, self.url, self.name) as (connection, committed):
            yield PostgresTransaction(self.name, connection, committed)

    def rows(self) -> ModeRows:
        from shared.bus.state.postgres_rows import PostgresRows

        return PostgresRows(self.name, self.url, self._pools)

    async def states(self) -> AsyncIterator[StateRow]:
        from shared.bus.state.postgres_rows import decode_properties

        with _translating(f"listing states of {self.name}"):
            pool = await self._pool()
            async with pool.acquire() as c, c.transaction():
                # Token mode's state rows, and the window modes' (in their rows table).
                async for row in c.cursor(
                    f"SELECT partition_key, type, data::text AS data, version, "
                    f"NULL AS properties FROM {SCHEMA}.state WHERE endpoint = $1 "
                    "UNION ALL SELECT partition_key, NULL, NULL, version, properties "
                    f"FROM {SCHEMA}.mode_rows WHERE endpoint = $1 AND row_key = $2 "
                    "ORDER BY partition_key",
                    self.name,
                    STATE_ROW,
                ):
                    kind, data = row["type"], row["data"]
                    if row["properties"] is not None:
                        properties = decode_properties(row["properties"])
                        kind, data = str(properties.get("type", "")), str(properties["data"])
                    yield StateRow(row["partition_key"], kind, data, str(row["version"]))

    async def audit_page(
        self, continuation: str | None, page_size: int
    ) -> tuple[list[Entity], str | None]:
        return await self._keyset_page(
            "audit", _AUDIT_COLUMNS, self._audit_entity, continuation, page_size, "audit rows"
        )

    def _audit_entity(self, row: Any) -> Entity:
        properties: dict[str, Any] = dict(row)
        del properties["partition_key"]
        return Entity(
            row["partition_key"],
            audit_row(row["message_id"]),
            {"endpoint": self.name, **properties},
        )

    async def expire_audit(self, before: datetime) -> int:
        async def expire() -> int:
            pool = await self._pool()
            status = await pool.execute(
                f"DELETE FROM {SCHEMA}.audit WHERE endpoint = $1 AND processed_at < $2",
                self.name,
                before,
            )
            return int(str(status).rsplit(" ", 1)[-1])

        return await translated(f"expiring audit rows of {self.name}", expire)
