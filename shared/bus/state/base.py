"""The endpoint-state seam: what every store of state + O(m) + audit rows must do.

The contract (``tests/contract/test_endpoint_state_contract.py`` runs it on every store):

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

import abc
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal

from shared.bus.records import AuditRecord, OutboxRecord, outbox_row
from shared.bus.state.damaged import OnDamaged
from shared.bus.state.rows import ModeRows
from shared.errors import InvalidValue
from shared.stores.table import Entity

StoreKind = Literal["table", "postgres"]
STORES: tuple[StoreKind, ...] = ("table", "postgres")


def next_page(last: OutboxRecord | AuditRecord | Entity) -> str:
    """The continuation of a SQL page: the key of its last row (plain text, so it survives
    in the cleanup's and the export's checkpoints)."""
    if isinstance(last, Entity):
        return resume_after(last.partition_key, str(last["message_id"]))
    return resume_after(last.partition_key, last.message_id)


def resume_after(partition_key: str, message_id: str) -> str:
    """The continuation of a SQL page that ends with this key (``next_page``)."""
    return json.dumps([partition_key, message_id])


def page_after(continuation: str | None) -> tuple[str, str] | None:
    if continuation is None:
        return None
    try:
        partition_key, message_id = json.loads(continuation)
        return str(partition_key), str(message_id)
    except (ValueError, TypeError) as e:
        raise InvalidValue(f"malformed continuation {continuation!r}") from e


@dataclass(frozen=True)
class StateRow:
    """A partition's business state as stored: its type name, JSON and version."""

    partition_key: str
    type: str
    data: str
    version: str


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


class StateTransaction(abc.ABC):
    """One open unit of work, from before the handler runs to the commit."""

    @property
    def sql(self) -> Any:
        """The open database connection a handler may write its own tables with (PostgreSQL);
        None where the store has no such transaction (Table Storage)."""
        return None

    @abc.abstractmethod
    async def commit(self, state: StateWrite, outbox: OutboxRecord, audit: AuditRecord) -> str:
        """Write state, the committed O(m) (guarded by ``outbox.etag``) and the audit row in
        one transaction and end it. Returns O(m)'s new version. Raises TransactionFailed
        (nothing written) or OutcomeUnknown."""


class EndpointState(abc.ABC):
    """One endpoint's rows. ``kind`` names the store in logs and operation counts."""

    name: str
    kind: str

    def where_outbox(self, partition_key: str, message_id: str) -> str:
        """O(m) named for a log: its table and key."""
        return f"{self.name} {partition_key!r}/{outbox_row(message_id)!r}"

    @abc.abstractmethod
    async def read(self, partition_key: str, message_id: str) -> Snapshot:
        """The state row and O(m) of ``partition_key`` in one query."""

    @abc.abstractmethod
    async def insert_outbox(self, record: OutboxRecord) -> str:
        """Create O(m); returns its version. AlreadyExists if it exists."""

    @abc.abstractmethod
    async def delete_outbox(self, record: OutboxRecord) -> None:
        """Delete O(m) while its version is ``record.etag`` (PreconditionFailed if changed;
        nothing to do if it is gone)."""

    @abc.abstractmethod
    async def fence_outbox(self, record: OutboxRecord) -> OutboxRecord:
        """Rewrite O(m) unchanged under a new version, while its version is ``record.etag``
        (PreconditionFailed if changed, NotFound if gone): a round that read the old version
        can no longer commit through it (the cleanup does this before deleting a token)."""

    @abc.abstractmethod
    async def outbox_page(
        self, continuation: str | None, page_size: int, on_damaged: OnDamaged | None = None
    ) -> tuple[list[OutboxRecord], str | None]:
        """One page of O(m) records in key order and where the next starts (None: done). A
        record that cannot be read is handed to ``on_damaged`` and left out of the page, which
        goes on after it (raised where there is no ``on_damaged``: ``shared.bus.state.damaged``).
        """

    @abc.abstractmethod
    def begin(self) -> AbstractAsyncContextManager[StateTransaction]:
        """Open a unit of work. Leaving it without ``commit`` rolls everything back."""

    @abc.abstractmethod
    def rows(self) -> ModeRows:
        """The endpoint's window-mode rows, in the same store (``shared.bus.state.rows``)."""

    @abc.abstractmethod
    def states(self) -> AsyncIterator[StateRow]:
        """Every partition's state row, whichever mode wrote it (for tools and tests)."""

    async def outbox_records(self) -> AsyncIterator[OutboxRecord]:
        """Every O(m) of the endpoint, page by page (for tools and tests)."""
        continuation: str | None = None
        while True:
            page, continuation = await self.outbox_page(continuation, 1000)
            for record in page:
                yield record
            if continuation is None:
                return

    @abc.abstractmethod
    async def audit_page(
        self, continuation: str | None, page_size: int
    ) -> tuple[list[Entity], str | None]:
        """One page of audit rows in key order, in the Table Storage entity layout the audit
        reads, and where the next page starts (None: done). For ``bus-audit export``."""

    async def audit_entities(self) -> AsyncIterator[Entity]:
        """Every audit row, page by page."""
        continuation: str | None = None
        while True:
            page, continuation = await self.audit_page(continuation, 1000)
            for entity in page:
                yield entity
            if continuation is None:
                return

    @abc.abstractmethod
    async def expire_audit(self, before: Any) -> int:
        """Delete audit rows processed before ``before`` (a datetime); returns how many."""
