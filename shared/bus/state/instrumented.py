"""Counting and fault injection for SQL endpoint rows, as ``shared.stores.instrumented`` does
for the storage account: every read, insert, update, delete, page and commit is one numbered
operation (``sql.query``, ``sql.get``, ``sql.insert``, ``sql.update``, ``sql.delete``,
``sql.transact``) of the same ``Instrumentation``, so the fault matrix and the simulator reach
PostgreSQL endpoints too. Expiring audit rows (a tool's and the cleanup's) is passed through
uncounted. An injected timeout or lost response is ``StateUnreachable``, as the PostgreSQL
adapter reports one (``shared.bus.state.postgres``): the database is the app's state store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from shared.bus.records import AuditRecord
from shared.bus.state.base import EndpointState
from shared.bus.state.damaged import OnDamaged
from shared.bus.state.rows import EndpointRows, RowsTransaction
from shared.bus.state.stores import SqlDatabase
from shared.errors import OutcomeUnknown, StateUnreachable
from shared.stores.instrumented import Instrumentation
from shared.stores.table import Entity, TableOperation

T = TypeVar("T")


async def _run(i: Instrumentation, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
    """One numbered operation; no answer from the database is ``StateUnreachable``."""
    try:
        return await i.run(kind, target, call)
    except StateUnreachable:
        raise
    except OutcomeUnknown as e:
        raise StateUnreachable(f"the database did not answer: {e}") from e


class InstrumentedSql:
    def __init__(self, inner: SqlDatabase, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.instrumentation = instrumentation

    def endpoint_rows(self, endpoint: str) -> EndpointRows:
        return InstrumentedRows(self.inner.endpoint_rows(endpoint), self.instrumentation)

    def endpoint_state(self, endpoint: str) -> EndpointState:
        return EndpointState(self.endpoint_rows(endpoint))

    async def close(self) -> None:
        await self.inner.close()


class _RowsTransaction(RowsTransaction):
    def __init__(self, inner: RowsTransaction, name: str, i: Instrumentation) -> None:
        self._inner = inner
        self._name = name
        self._i = i

    @property
    def sql(self) -> object:
        return self._inner.sql

    async def commit(
        self, operations: Sequence[TableOperation], audit: AuditRecord
    ) -> list[str | None]:
        return await _run(
            self._i,
            "sql.transact",
            f"{self._name}/{audit.partition_key}",
            lambda: self._inner.commit(operations, audit),
        )


class InstrumentedRows(EndpointRows):
    """An endpoint's rows in SQL, each call one numbered operation."""

    def __init__(self, inner: EndpointRows, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.name = inner.name
        self.kind = inner.kind
        self._i = instrumentation

    def where(self, partition_key: str, row_key: str) -> str:
        return self.inner.where(partition_key, row_key)

    async def read(
        self, partition_key: str, row_keys: Sequence[str], on_damaged: OnDamaged | None = None
    ) -> dict[str, Entity]:
        return await _run(
            self._i,
            "sql.query",
            f"{self.name}/{partition_key}",
            lambda: self.inner.read(partition_key, row_keys, on_damaged),
        )

    async def get(self, partition_key: str, row_key: str) -> Entity:
        return await _run(
            self._i,
            "sql.get",
            f"{self.name}/{partition_key}/{row_key}",
            lambda: self.inner.get(partition_key, row_key),
        )

    async def insert(self, entity: Entity) -> str:
        return await _run(
            self._i,
            "sql.insert",
            f"{self.name}/{entity.partition_key}/{entity.row_key}",
            lambda: self.inner.insert(entity),
        )

    async def update(self, entity: Entity, etag: str) -> str:
        return await _run(
            self._i,
            "sql.update",
            f"{self.name}/{entity.partition_key}/{entity.row_key}",
            lambda: self.inner.update(entity, etag),
        )

    async def delete(self, partition_key: str, row_key: str, etag: str | None = None) -> None:
        await _run(
            self._i,
            "sql.delete",
            f"{self.name}/{partition_key}/{row_key}",
            lambda: self.inner.delete(partition_key, row_key, etag),
        )

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
        return await _run(
            self._i,
            "sql.query",
            self.name,
            lambda: self.inner.page(
                row_key_prefix=row_key_prefix,
                row_key=row_key,
                page_size=page_size,
                continuation=continuation,
                on_damaged=on_damaged,
                partition_key=partition_key,
            ),
        )

    @contextlib.asynccontextmanager
    async def begin(self, connection: Any = None) -> AsyncIterator[RowsTransaction]:
        async with self.inner.begin(connection) as transaction:
            yield _RowsTransaction(transaction, self.name, self._i)

    async def expire_audit(self, before: datetime, on_damaged: OnDamaged | None = None) -> int:
        return await self.inner.expire_audit(before, on_damaged)
