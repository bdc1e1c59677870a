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
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from shared.bus.records import AuditRecord, OutboxRecord
from shared.bus.state.base import (
    EndpointState,
    Snapshot,
    StateRow,
    StateTransaction,
    StateWrite,
    next_page,
    page_after,
)
from shared.errors import (
    AlreadyExists,
    InvalidValue,
    NotFound,
    PreconditionFailed,
    TransactionFailed,
)
from shared.stores.table import Entity


@dataclass
class MemorySqlDatabase:
    """One database: every endpoint's rows, keyed by endpoint as the SQL tables are."""

    states: dict[tuple[str, str], StateRow] = field(default_factory=dict)
    outboxes: dict[tuple[str, str, str], OutboxRecord] = field(default_factory=dict)
    audits: dict[tuple[str, str, str], Entity] = field(default_factory=dict)
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


def _check_key(name: str, value: str) -> None:
    # PostgreSQL text refuses NUL; keys are bounded by the bus's names already.
    if "\x00" in value:
        raise InvalidValue(f"{name} may not contain NUL characters")


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
        audit_key = (name, audit.partition_key, audit.message_id)
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

    async def read(self, partition_key: str, message_id: str) -> Snapshot:
        return Snapshot(
            self.db.states.get((self.name, partition_key)),
            self.db.outboxes.get((self.name, partition_key, message_id)),
        )

    async def insert_outbox(self, record: OutboxRecord) -> str:
        _check_key("partition key", record.partition_key)
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
        self, continuation: str | None, page_size: int
    ) -> tuple[list[OutboxRecord], str | None]:
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

    async def states(self) -> AsyncIterator[StateRow]:
        for (endpoint, _), row in sorted(self.db.states.items()):
            if endpoint == self.name:
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
