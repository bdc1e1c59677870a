"""Transactional sessions: a web request's own writes and the messages it sends, committed
together (``docs/sessions.md``).

A session is an outbox whose owner is a request instead of an incoming message. It belongs to
one endpoint declared with ``sessions=True`` (its sends are that endpoint's: the app's routes
check them) and to one partition of that endpoint's rows, where its record O(s) lives beside
the user's own rows (``shared.bus.session_records``). Its steps are token mode's R3-R6 with the
request in place of the incoming message:

- S1 read O(s) (one query): committed means this request was made before under the same key
  (``deduplicated``: nothing is written; its signals are sent again if it never got to mark
  them sent); absent, it is inserted open (409: read again); open, it is used with its ETag.
- S2 the user writes (``insert``/``update`` of its own rows of the partition, or through
  ``sql``, the user's PostgreSQL connection inside the transaction the session opened on it)
  and sends (``send``/``publish``).
- S3 on leaving the block: one token per delivery, each created once under a fresh attempt id,
  naming O(s) as its origin (``shared.bus.outgoing``).
- S4 one transaction: the user's writes, O(s) committed while unchanged with the signals it
  sends, and the session's audit row. Lost to another writer: its tokens are deleted and
  ``SessionConflict`` raised. Unknown outcome: its tokens stay for the cleanup to judge by
  O(s) after the grace period, and the error goes to the caller (a retry under the same key
  finds out).
- S5 the signals; S6 O(s) marked signalled. A request that stops between S4 and S6 leaves a
  committed, unsignalled O(s): the cleanup sends its signals after
  ``BUS_SESSION_RESEND_SECONDS`` (``shared.cleanup.sessions``). Signals sent twice are
  harmless: each token is claimed once.

Leaving the block with an exception rolls the transaction back and sends nothing; the open
O(s) is retired by the cleanup after the grace period, which also fences a commit stalled past
it (its If-Match fails once O(s) is gone).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from shared.bus.app import Endpoint
from shared.bus.config import BusConfig
from shared.bus.context import PendingOutput, add_output
from shared.bus.messages import Command, Event
from shared.bus.origin import Origin
from shared.bus.outgoing import (
    CreatedTokens,
    create_tokens,
    discard_tokens,
    plan_deliveries,
    send_signals,
)
from shared.bus.records import AuditRecord, caused_by
from shared.bus.schedule import due_time
from shared.bus.session_records import (
    SESSION_MODE,
    SessionRecord,
    check_session_key,
    check_user_row_key,
    session_id,
    session_row,
)
from shared.bus.state.rows import EndpointRows, RowsTransaction
from shared.bus.telemetry import trace_headers
from shared.bus.topics import RecipientLists
from shared.clock import to_datetime
from shared.errors import (
    AlreadyExists,
    ConfigurationError,
    ConflictRetriesExhausted,
    InvalidValue,
    LimitExceeded,
    OutcomeUnknown,
    PermanentFailure,
    SessionConflict,
    StorageError,
    TransactionFailed,
)
from shared.resources import check_endpoint_name
from shared.stores.account import StorageAccount
from shared.stores.names import MAX_TRANSACTION_OPERATIONS
from shared.stores.table import Entity, Insert, TableOperation, Update

log = logging.getLogger(__name__)

MAX_USER_WRITES = MAX_TRANSACTION_OPERATIONS - 2
"""The user's own row writes a session commits with O(s) and its audit row: one entity-group
transaction on Table Storage holds 100 operations; counted on every store alike."""


class Session:
    """One request's unit of work; use it as ``async with bus.session(...) as s``."""

    def __init__(
        self,
        endpoint: Endpoint[Any],
        rows: EndpointRows,
        account: StorageAccount,
        topics: RecipientLists,
        config: BusConfig,
        *,
        partition: str,
        key: str | None,
        scope: str,
        connection: Any = None,
    ) -> None:
        if not endpoint.sessions:
            raise ConfigurationError(
                f"endpoint {endpoint.name} takes no sessions: declare it with sessions=True"
            )
        if not isinstance(partition, str) or not partition:
            raise InvalidValue("a session needs the partition its rows are in")
        self.endpoint = endpoint
        self.partition_key = partition
        self.scope = scope
        self.session_id = session_id(endpoint.name, partition, scope, check_session_key(key))
        """The same for every retry of one request under its key (``session_records``)."""
        self.deduplicated = False
        """True when this request was made before under the same key and committed: the
        session writes and sends nothing new (``message_ids`` are the first request's)."""
        self.round_id = ""
        """The id the session's messages derive from (its record's round), once entered."""
        self.message_ids: tuple[str, ...] = ()
        """The messages the session sent (or, deduplicated, the first request sent)."""
        self._rows = rows
        self._account = account
        self._topics = topics
        self._config = config
        self._connection = connection
        self._tokens = account.blob_container(config.tokens_container)
        self._payloads = account.blob_container(config.payloads_container)
        self._record: SessionRecord | None = None
        self._opened: AbstractAsyncContextManager[RowsTransaction] | None = None
        self._transaction: RowsTransaction | None = None
        self._writes: list[TableOperation] = []
        self._outputs: list[PendingOutput] = []
        self._ended = False

    # --- what the user's code calls -------------------------------------------------------

    @property
    def sql(self) -> Any:
        """The database connection inside the session's transaction (PostgreSQL): the user's
        own when one was given, else one of the bus's pool. None on Table Storage."""
        return None if self._transaction is None else self._transaction.sql

    async def read(self, row_keys: Sequence[str]) -> dict[str, Entity]:
        """The user's own rows of the partition among ``row_keys`` that exist, with their
        versions for ``update``."""
        keys = [check_user_row_key(k) for k in row_keys]
        return await self._rows.read(self.partition_key, keys)

    def insert(self, entity: Entity) -> None:
        """Create one of the user's rows of the partition when the session commits (the
        commit fails with ``SessionConflict`` if it exists by then)."""
        self._write(Insert(self._own(entity)))

    def update(self, entity: Entity, etag: str) -> None:
        """Replace one of the user's rows when the session commits, while its version is
        still ``etag`` (from ``read``)."""
        if not etag:
            raise InvalidValue("a session's update needs the version its row was read at")
        self._write(Update(self._own(entity), etag))

    def send(
        self,
        command: Command,
        *,
        to: str,
        headers: dict[str, str] | None = None,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
    ) -> None:
        """Send ``command`` to endpoint ``to`` if the session commits."""
        if not isinstance(command, Command):
            raise TypeError(f"send() takes a Command; publish() events ({type(command)!r})")
        self._output(command, check_endpoint_name(to), headers, delay, deliver_at)

    def publish(
        self,
        event: Event,
        *,
        headers: dict[str, str] | None = None,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
    ) -> None:
        """Publish ``event`` to its topic's subscribers if the session commits."""
        if not isinstance(event, Event):
            raise TypeError(f"publish() takes an Event; send() commands ({type(event)!r})")
        self._output(event, None, headers, delay, deliver_at)

    # --- the steps ------------------------------------------------------------------------

    async def __aenter__(self) -> Session:
        record = await self._open()  # S1
        self._record = record
        self.round_id = record.round_id
        if record.committed:
            self.deduplicated = True
            self.message_ids = tuple(o.message_id for o in record.outgoing)
            if not record.signalled:
                await self._signal(record, {})
        # S2. Begun even for a repeated request, and then rolled back: writes through the
        # user's connection must not land outside a transaction either.
        self._opened = self._rows.begin(self._connection)
        self._transaction = await self._opened.__aenter__()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._ended = True
        opened, self._opened = self._opened, None
        if opened is None:
            return
        try:
            if error is None and not self.deduplicated:
                await self._commit()
        finally:
            await opened.__aexit__(kind, error, traceback)

    async def _open(self) -> SessionRecord:
        """S1: O(s) as it is, or inserted open."""
        row = session_row(self.session_id)
        for _ in range(self._config.max_conflict_rounds):
            found = await self._rows.read(self.partition_key, [row])
            if row in found:
                return SessionRecord.from_entity(found[row])
            record = SessionRecord(
                self.partition_key,
                self.session_id,
                self._config.new_id(),
                started_at=to_datetime(self._config.clock()),
                format=self._config.wire_format,
            )
            with contextlib.suppress(AlreadyExists):  # a concurrent request: read it
                return replace(record, etag=await self._rows.insert(record.to_entity()))
        raise ConflictRetriesExhausted(
            f"session {self.session_id} at {self.endpoint.name}: its record kept changing"
        )

    async def _commit(self) -> None:
        """S3-S6."""
        record, transaction = self._record, self._transaction
        if record is None or transaction is None:
            raise InvalidValue("the session was not entered")
        abandoned = list(record.abandoned)
        created = await self._create_tokens(record.round_id, abandoned)  # S3
        committed = record.committing(
            created.committed_candidates, abandoned, to_datetime(self._config.clock())
        )
        operations = [*self._writes, Update(committed.to_entity(), record.etag)]
        try:
            versions = await transaction.commit(operations, self._audit(committed))  # S4
        except (PermanentFailure, TransactionFailed) as e:
            await discard_tokens(self._tokens, created.committed_candidates)
            if isinstance(e, TransactionFailed):
                await self._check_database(e, record)
                raise SessionConflict(self._lost(e)) from e
            raise
        # OutcomeUnknown goes on: the tokens stay, O(s) decides them (the module's S4).
        version = versions[-1]
        committed = replace(committed, etag=version or "")
        self.message_ids = tuple(o.message_id for o in committed.outgoing)
        await self._signal(committed, created.hints)

    async def _create_tokens(self, round_id: str, abandoned: list[str]) -> CreatedTokens:
        name = self.endpoint.name
        deliveries = await plan_deliveries(
            self._outputs,
            sender=name,
            incoming_id=round_id,
            correlation_id=round_id,
            topics=self._topics,
            routes=self.endpoint.routes,
            config=self._config,
        )
        created = await create_tokens(
            self._tokens,
            deliveries,
            payloads=self._payloads,
            sender=name,
            incoming_id=round_id,
            config=self._config,
            origin=Origin(name, self.partition_key, session_row(self.session_id)).encode(),
        )
        abandoned.extend(created.abandoned)
        return created

    async def _signal(self, committed: SessionRecord, hints: Any) -> None:
        """S5 and S6. Neither failing undoes the commit: the cleanup sends the signals of a
        committed O(s) that is not marked signalled (``shared.cleanup.sessions``)."""
        try:
            await send_signals(self._account, committed.outgoing, hints, config=self._config)
            signalled = replace(committed, signalled=True)
            await self._rows.update(signalled.to_entity(), committed.etag)
        except (StorageError, OutcomeUnknown) as e:  # PreconditionFailed included
            log.warning(
                "session %s at %s committed; its signals are left to the cleanup: %s",
                self.session_id,
                self.endpoint.name,
                e,
            )

    def _audit(self, committed: SessionRecord) -> AuditRecord:
        at = committed.committed_at or committed.started_at
        return AuditRecord(
            partition_key=self.partition_key,
            endpoint=self.endpoint.name,
            message_id=committed.round_id,
            message_type=SESSION_MODE,
            source=self.scope,
            correlation_id=committed.round_id,
            causation_id=None,
            sent_at=committed.started_at,
            processed_at=at,
            mode=SESSION_MODE,
            caused=caused_by(committed.outgoing),
        )

    async def _check_database(self, error: TransactionFailed, record: SessionRecord) -> None:
        """A commit on the user's own connection that found no O(s) to update, while O(s) is
        unchanged where the bus reads it: the connection is to another database."""
        if self._connection is None or error.index != len(self._writes):
            return
        found = await self._rows.read(self.partition_key, [session_row(self.session_id)])
        current = found.get(session_row(self.session_id))
        if current is not None and current.etag == record.etag:
            raise ConfigurationError(
                f"the connection given to the session of {self.endpoint.name} is not to the "
                "database its rows are in (BUS_POSTGRES_URL or its endpoint's own URL): "
                "nothing was written or sent"
            )

    def _lost(self, error: TransactionFailed) -> str:
        where = (
            "its record (another request under the same key committed it first, or the "
            "cleanup retired it: the session outlived the grace period)"
            if error.index == len(self._writes)
            else f"the user's write #{error.index + 1}"
            if error.index < len(self._writes)
            else "its audit row"
        )
        return (
            f"session {self.session_id} at {self.endpoint.name} did not commit: {where} "
            f"conflicted ({error.cause}); nothing was written or sent"
        )

    # --- checks ---------------------------------------------------------------------------

    def _usable(self) -> None:
        if self._ended:
            raise InvalidValue("the session has ended: write and send inside its block")
        if self.deduplicated:
            raise InvalidValue(
                f"session {self.session_id} committed before under the same key: it writes "
                "and sends nothing new (check `deduplicated` first)"
            )
        if self._transaction is None:
            raise InvalidValue("use the session inside `async with`")

    def _own(self, entity: Entity) -> Entity:
        if entity.partition_key != self.partition_key:
            raise InvalidValue(
                f"a session writes the rows of its own partition {self.partition_key!r} only, "
                f"not {entity.partition_key!r}"
            )
        check_user_row_key(entity.row_key)
        return entity

    def _write(self, operation: TableOperation) -> None:
        self._usable()
        if len(self._writes) >= MAX_USER_WRITES:
            raise LimitExceeded(
                f"a session writes at most {MAX_USER_WRITES} rows (one transaction holds "
                f"{MAX_TRANSACTION_OPERATIONS} with its record and audit row)"
            )
        self._writes.append(operation)

    def _output(
        self,
        message: Command | Event,
        to: str | None,
        headers: dict[str, str] | None,
        delay: timedelta | None,
        deliver_at: datetime | None,
    ) -> None:
        self._usable()
        due = due_time(to_datetime(self._config.clock()), delay, deliver_at)
        output = PendingOutput(message, to, dict(headers or {}), trace_headers(), due)
        add_output(
            self._outputs,
            output,
            max_outputs=self._config.max_outputs,
            max_payload=self._config.max_payload_bytes,
        )
