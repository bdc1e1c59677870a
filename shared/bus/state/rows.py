"""One endpoint's rows behind one seam, whatever the mode: token mode's state row, outbox
records O(m) and audit rows (typed in ``shared.bus.state.base``), and the window modes'
processed-message records, state streams and their message index, entity-outbox state rows.

Every row is a Table Storage entity: a partition key, a row key and typed properties.
``EndpointRows`` is what the bus needs of a store of such rows, which Table Storage
(``TableRows``), PostgreSQL (``shared.bus.state.postgres_rows``), the in-memory model of
PostgreSQL (``shared.bus.state.memory_sql``) and the counting wrapper
(``shared.bus.state.instrumented``) all provide; ``tests/contract/test_endpoint_rows_contract.py``
runs the contract on each:

- ``read`` returns some rows of one partition as of one moment (one query);
- ``insert`` creates a row only if absent (AlreadyExists otherwise);
- ``update`` replaces a row only while its version is the one given (PreconditionFailed if it
  changed, NotFound if it is gone); ``delete`` removes it, with a version only while unchanged,
  and does nothing when it is gone;
- ``page`` lists rows in (partition, row) order, by row-key prefix or by one exact row key,
  and returns the continuation of the next page (opaque: the store's own); a row whose
  stored properties cannot be read goes to ``on_damaged`` (``shared.bus.state.damaged``);
- a ``RowsTransaction`` commits inserts (only if absent) and updates (only while unchanged)
  together with the message's audit row (only if absent), all or nothing:
  ``TransactionFailed(index)`` names the first failing operation (``len(operations)`` for the
  audit row), ``OutcomeUnknown`` means the commit may or may not have landed. It is opened
  before the handler runs, so a handler's writes through ``sql`` (PostgreSQL) join it.

Versions are opaque: the ETag on Table Storage, a version column drawn from one sequence in
PostgreSQL.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from shared.bus.records import AUDIT_PREFIX, AuditRecord
from shared.bus.state.damaged import DamagedRow, OnDamaged, read_each
from shared.bus.state.schema import SCHEMA
from shared.errors import (
    InvalidValue,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    TransactionFailed,
)
from shared.stores.spread import gathered, spread
from shared.stores.table import (
    Delete,
    Entity,
    Insert,
    Table,
    TableOperation,
    Update,
)

log = logging.getLogger(__name__)


def _key(entity: Entity) -> tuple[str, str]:
    return entity.partition_key, entity.row_key


RowsWrite = Insert | Update
"""What a window mode commits: a row inserted if absent, or replaced while unchanged."""


def check_writes(operations: Sequence[TableOperation]) -> list[RowsWrite]:
    """The commit's operations, refusing any kind the seam does not promise to every store."""
    writes: list[RowsWrite] = []
    for operation in operations:
        if not isinstance(operation, Insert | Update) or (
            isinstance(operation, Update) and operation.etag is None
        ):
            raise InvalidValue(
                f"a window mode commits inserts and version-guarded updates only, "
                f"not {type(operation).__name__}"
            )
        writes.append(operation)
    return writes


def sql_resume_at(partition_key: str, row_key: str) -> str:
    """A SQL page's continuation: the key of the row it starts with, as plain text (it
    survives in the cleanup's checkpoints)."""
    return json.dumps([partition_key, row_key])


def sql_page_start(
    continuation: str | None, row_key_prefix: str | None = None
) -> tuple[str, str] | None:
    """Where a SQL page starts (inclusive). A continuation always names a row the page's
    filter matched; one whose row key lacks ``row_key_prefix`` was written before migration
    3 by the outbox or audit listing of the old tables, and names the message id the page
    ended *after*: it resumes just after that message's row ("\x01" sorts right after the
    key in the "C" collation, and PostgreSQL text holds no NUL)."""
    if continuation is None:
        return None
    try:
        partition_key, row_key = json.loads(continuation)
        start = str(partition_key), str(row_key)
    except (ValueError, TypeError) as e:
        raise InvalidValue(f"malformed continuation {continuation!r}") from e
    if row_key_prefix is not None and not start[1].startswith(row_key_prefix):
        return start[0], f"{row_key_prefix}{start[1]}\x01"
    return start


def where_in_sql(endpoint: str, partition_key: str, key: str, table: str = "mode_rows") -> str:
    """A row of a table of the ``bus`` schema named for a log: table, endpoint and key (a
    row key, or in ``outbox`` and ``audit`` a message id)."""
    return f"{SCHEMA}.{table} of {endpoint} {partition_key!r}/{key!r}"


def check_sql_key(name: str, value: str) -> None:
    # PostgreSQL text refuses NUL; the bus's names bound the keys otherwise.
    if "\x00" in value:
        raise InvalidValue(f"{name} may not contain NUL characters")


EVERY_PAGE_SIZE = 1000
"""Rows per request when ``EndpointRows.every`` reads a whole selection."""


class RowsTransaction(abc.ABC):
    """One open unit of work, from before the handler runs to the commit."""

    @property
    def sql(self) -> Any:
        """The open database connection a handler may write its own tables with (PostgreSQL);
        None where the store has no such transaction (Table Storage)."""
        return None

    @abc.abstractmethod
    async def commit(
        self, operations: Sequence[TableOperation], audit: AuditRecord
    ) -> list[str | None]:
        """Write the rows and the audit row all or nothing and end the unit of work. Returns
        the operations' new versions, in order. Raises TransactionFailed or OutcomeUnknown."""


class EndpointRows(abc.ABC):
    """One endpoint's rows. ``name`` is the endpoint (and its table's name); ``kind`` names
    the store in logs and operation counts."""

    name: str
    kind: str

    def where(self, partition_key: str, row_key: str) -> str:
        """A row named for a log: its table and key."""
        return f"{self.name} {partition_key!r}/{row_key!r}"

    def damaged(self, entity: Entity, error: BaseException) -> DamagedRow:
        """``entity`` of these rows as one that cannot be read, and why."""
        return self.damaged_at(entity.partition_key, entity.row_key, error)

    def damaged_at(self, partition_key: str, row_key: str, error: BaseException) -> DamagedRow:
        """The row at this key as one that cannot be read, and why."""
        return DamagedRow(self.where(partition_key, row_key), (partition_key, row_key), error)

    @abc.abstractmethod
    async def read(
        self, partition_key: str, row_keys: Sequence[str], on_damaged: OnDamaged | None = None
    ) -> dict[str, Entity]:
        """The rows of ``partition_key`` among ``row_keys`` that exist, by row key, in one
        query. A row whose stored properties cannot be read is handed to ``on_damaged`` and
        left out (raised where there is none)."""

    @abc.abstractmethod
    async def get(self, partition_key: str, row_key: str) -> Entity:
        """One row; NotFound if absent."""

    @abc.abstractmethod
    async def insert(self, entity: Entity) -> str:
        """Create the row; returns its version. AlreadyExists if it exists."""

    @abc.abstractmethod
    async def update(self, entity: Entity, etag: str) -> str:
        """Replace the row while its version is ``etag``; returns the new version."""

    @abc.abstractmethod
    async def delete(self, partition_key: str, row_key: str, etag: str | None = None) -> None:
        """Remove the row (with ``etag``: only while unchanged); nothing to do if absent."""

    @abc.abstractmethod
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
        """One page of the rows whose row key starts with ``row_key_prefix`` or equals
        ``row_key``, across partitions (or in ``partition_key`` only) in key order, and where
        the next page starts. A row
        whose stored properties cannot be read is handed to ``on_damaged`` and left out of
        the page (raised where there is none: ``shared.bus.state.damaged``)."""

    async def every(
        self, *, row_key_prefix: str | None = None, row_key: str | None = None
    ) -> AsyncIterator[Entity]:
        """Every row ``page`` selects, page after page (for tools, tests and the simulator;
        the bus's own passes page explicitly, to bound their work)."""
        continuation: str | None = None
        while True:
            page, continuation = await self.page(
                row_key_prefix=row_key_prefix,
                row_key=row_key,
                page_size=EVERY_PAGE_SIZE,
                continuation=continuation,
            )
            for entity in page:
                yield entity
            if continuation is None:
                return

    @abc.abstractmethod
    def begin(self, connection: Any = None) -> AbstractAsyncContextManager[RowsTransaction]:
        """Open a unit of work. Leaving it without ``commit`` rolls everything back.
        ``connection``: a caller's own database connection to open it on (a transactional
        session's, PostgreSQL only), left open afterwards; None: the store's own."""

    async def delete_unchanged(self, entities: Sequence[Entity]) -> list[Entity]:
        """Delete rows of one partition (at most ``MAX_TRANSACTION_OPERATIONS``), each while
        its version is the one read; returns the rows deleted. One that changed since it was
        read, or whose delete failed in storage (logged), stays for the next look. One at a
        time here; a store may delete them together."""
        deleted: list[Entity] = []
        for entity in entities:
            try:
                await self.delete(entity.partition_key, entity.row_key, etag=entity.etag)
            except PreconditionFailed:
                continue  # changed since it was read
            except (StorageError, OutcomeUnknown) as e:
                log.warning("row %s left for the next pass: %s", self.where(*_key(entity)), e)
                continue
            deleted.append(entity)
        return deleted

    async def expire_audit(self, before: datetime, on_damaged: OnDamaged | None = None) -> int:
        """Delete the audit rows processed before ``before``, each while unchanged; returns
        how many. Page by page over the audit rows; a store may do it more directly."""
        removed = 0
        continuation: str | None = None
        while True:
            page, continuation = await self.page(
                row_key_prefix=AUDIT_PREFIX,
                page_size=1000,
                continuation=continuation,
                on_damaged=on_damaged,
            )
            for entity in page:
                processed = entity.get("processed_at")
                if isinstance(processed, datetime) and processed < before:
                    await self.delete(entity.partition_key, entity.row_key, etag=entity.etag)
                    removed += 1
            if continuation is None:
                return removed


class TableRowsTransaction(RowsTransaction):
    """Table Storage has no transaction spanning the handler: the commit is the batch."""

    def __init__(self, table: Table) -> None:
        self._table = table

    async def commit(
        self, operations: Sequence[TableOperation], audit: AuditRecord
    ) -> list[str | None]:
        writes = [spread_write(write) for write in check_writes(operations)]
        etags = await self._table.transact([*writes, Insert(spread(audit.to_entity()))])
        return etags[: len(writes)]


class TableRows(EndpointRows):
    """The rows in the endpoint's table."""

    kind = "table"

    def __init__(self, table: Table) -> None:
        self.table = table
        self.name = table.name

    async def read(
        self, partition_key: str, row_keys: Sequence[str], on_damaged: OnDamaged | None = None
    ) -> dict[str, Entity]:
        keys = list(row_keys)
        page = await self.table.query(partition_key=partition_key, row_keys=keys)
        entities = page.entities
        if page.continuation is not None:
            # The service split the answer across pages (it may, rarely): each row on its own.
            entities = []
            for key in keys:
                with contextlib.suppress(NotFound):
                    entities.append(await self.table.get(partition_key, key))
        return {e.row_key: e for e in self._gathered(entities, on_damaged)}

    async def get(self, partition_key: str, row_key: str) -> Entity:
        return gathered(await self.table.get(partition_key, row_key))

    async def insert(self, entity: Entity) -> str:
        return await self.table.insert(spread(entity))

    async def update(self, entity: Entity, etag: str) -> str:
        return await self.table.update(spread(entity), etag=etag)

    async def delete(self, partition_key: str, row_key: str, etag: str | None = None) -> None:
        await self.table.delete(partition_key, row_key, etag=etag)

    async def delete_unchanged(self, entities: Sequence[Entity]) -> list[Entity]:
        if len(entities) > 1:
            try:
                await self.table.transact(
                    [Delete(e.partition_key, e.row_key, e.etag) for e in entities]
                )
            except (TransactionFailed, StorageError, OutcomeUnknown):
                pass  # one row changed or went, or no answer: delete each on its own
            else:
                return list(entities)
        return await super().delete_unchanged(entities)

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
        # A table's entities are read by the service: any damage is in their values, which
        # the modes judge row by row, or in the parts of a spread text, judged here.
        page = await self.table.query(
            partition_key=partition_key,
            row_key_prefix=row_key_prefix,
            row_keys=None if row_key is None else [row_key],
            page_size=page_size,
            continuation=continuation,
        )
        return self._gathered(page.entities, on_damaged), page.continuation

    def _gathered(self, entities: Sequence[Entity], on_damaged: OnDamaged | None) -> list[Entity]:
        """Texts spread across parts joined again (``shared.stores.spread``)."""
        return read_each(
            entities, gathered, lambda e: (e.partition_key, e.row_key), self.where, on_damaged
        )

    @contextlib.asynccontextmanager
    async def begin(self, connection: Any = None) -> AsyncIterator[RowsTransaction]:
        if connection is not None:
            raise InvalidValue(
                f"{self.name} is in Table Storage: a session there takes no connection"
            )
        yield TableRowsTransaction(self.table)


def spread_write(write: RowsWrite) -> RowsWrite:
    """A commit's write with its long texts spread (``shared.stores.spread``)."""
    if isinstance(write, Insert):
        return Insert(spread(write.entity))
    return Update(spread(write.entity), write.etag)
