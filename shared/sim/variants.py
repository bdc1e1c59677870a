"""Known-bad variants of the pipeline: each removes one rule of design notes section 3, and
the simulator must find the violation that rule prevents. They prove the checker can fail.

The pipeline code itself is not edited: a variant either wraps the stores the bus uses or
swaps one module-level name that the code under test calls, for the duration of a run.

The variants of the window modes each break what one reading of the invariants checks
(``shared.sim.invariants``): the dedup record committed with the state, the state committed
with the record, the signals the record commits, the state-based stream, and the retention
that bounds the residue.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import shared.bus.outgoing as outgoing
import shared.bus.receiver as receiver
import shared.cleanup.tasks as cleanup_tasks
from shared.bus.app import Mode
from shared.bus.envelope import Envelope, token_name
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX
from shared.bus.modes.state_based import INDEX_PREFIX, VERSION_PREFIX
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW, OutgoingSignal
from shared.errors import AlreadyExists, NotFound, OutcomeUnknown
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer, DelegatingTable
from shared.stores.table import (
    Delete,
    Entity,
    Table,
    TableOperation,
    Update,
    operation_key,
)

AccountWrapper = Callable[[StorageAccount], StorageAccount]

incoming_token: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "incoming_token", default=None
)
"""(container, token) named by the signal the current invocation is processing, set by the
simulator for variants that need to know it."""


@dataclass(frozen=True)
class Variant:
    name: str
    rule: str
    """The rule of the protocol this variant breaks."""
    wrap: AccountWrapper | None = None
    patch: Callable[[], contextlib.AbstractContextManager[None]] | None = None
    modes: tuple[Mode, ...] = ("token",)
    """The endpoint modes whose code this variant changes (it is explored only there)."""

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        if self.patch is None:
            yield
            return
        with self.patch():
            yield


class _Blobs(DelegatingBlobContainer):
    """Passes every call to ``inner``; variants override what they change."""


class _Table(DelegatingTable):
    """Passes every call to ``inner``; variants override what they change."""


class _Account(DelegatingAccount):
    def __init__(
        self,
        inner: StorageAccount,
        blobs: type[_Blobs] = _Blobs,
        table: type[_Table] = _Table,
    ) -> None:
        super().__init__(inner)
        self._blobs = blobs
        self._table = table

    def blob_container(self, name: str) -> BlobContainer:
        return self._blobs(self.inner.blob_container(name))

    def table(self, name: str) -> Table:
        return self._table(self.inner.table(name))


# -- no claim step (R4) ----------------------------------------------------------------------


class _ClaimIgnored(_Blobs):
    """The claim write is never sent: set_metadata reports success (with the ETag it was
    given) without touching the blob."""

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        if "claim" not in metadata:
            return await super().set_metadata(name, metadata, etag=etag)
        return etag or '"unclaimed"'


NO_CLAIM = Variant(
    "no-claim",
    "R4: the token is claimed by compare-and-swap before the handler runs",
    wrap=lambda account: _Account(account, blobs=_ClaimIgnored),
)


# -- state committed without the outbox record (R5) ------------------------------------------


class _OutboxDropped(_Table):
    """The commit transaction loses its outbox-record update: state and audit row commit,
    O(m) stays as it was."""

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        dropped = [
            index
            for index, op in enumerate(operations)
            if isinstance(op, Update) and operation_key(op)[1].startswith(OUTBOX_PREFIX)
        ]
        if not dropped or len(dropped) == len(operations):
            return await self.inner.transact(operations)
        kept = [op for index, op in enumerate(operations) if index not in dropped]
        etags = iter(await self.inner.transact(kept))
        return [None if index in dropped else next(etags) for index in range(len(operations))]


NO_OUTBOX_IN_COMMIT = Variant(
    "no-outbox-in-commit",
    "R5: state and O(m) commit in one transaction",
    wrap=lambda account: _Account(account, table=_OutboxDropped),
)


# -- incoming token deleted before the signals are sent (R6/R7 swapped) ----------------------


@contextlib.contextmanager
def _delete_before_send() -> Iterator[None]:
    original = receiver.send_signals

    async def delete_then_send(account: StorageAccount, *args: Any, **kwargs: Any) -> None:
        where = incoming_token.get()
        if where is not None:
            container, token = where
            with contextlib.suppress(NotFound):
                await account.blob_container(container).delete(token)
        await original(account, *args, **kwargs)

    receiver.send_signals = delete_then_send
    try:
        yield
    finally:
        receiver.send_signals = original


DELETE_BEFORE_SEND = Variant(
    "delete-before-send",
    "R6 before R7: signals are sent before the incoming token is deleted",
    patch=_delete_before_send,
)


# -- an attempt id reused after an unknown create outcome ------------------------------------


@contextlib.contextmanager
def _reuse_attempt_ids() -> Iterator[None]:
    original = receiver.create_tokens

    async def create_reusing(
        tokens: BlobContainer,
        deliveries: list[Envelope],
        *,
        sender: str,
        incoming_id: str,
        config: Any,
        origin: str = "",
        **_: Any,
    ) -> outgoing.CreatedTokens:
        metadata: dict[str, str] = dict(outgoing.UNCLAIMED)
        if origin:
            metadata[getattr(outgoing, "ORIGIN_METADATA", "origin")] = origin
        result = outgoing.CreatedTokens([], [])
        for envelope in deliveries:
            attempt_id = config.new_id()
            name = token_name(sender, incoming_id, attempt_id, envelope.id, envelope.to_bytes())
            for _try in range(config.max_create_attempts):
                try:
                    await tokens.create(name, envelope.to_bytes(), metadata)
                except AlreadyExists:
                    break  # "must be ours from the earlier try": the unsafe assumption
                except OutcomeUnknown:
                    continue  # retried with the same attempt id
                break
            result.committed_candidates.append(OutgoingSignal.for_token(envelope, attempt_id, name))
        return result

    receiver.create_tokens = create_reusing
    try:
        yield
    finally:
        receiver.create_tokens = original


REUSED_ATTEMPT_ID = Variant(
    "reused-attempt-id",
    "attempt ids are at-most-once: never commit one whose create had an unknown outcome",
    patch=_reuse_attempt_ids,
)

# -- window modes: commits that leave out or alter part of what they must write -------------

Rewrite = Callable[[TableOperation], TableOperation | None]


def _rewriting(rewrite: Rewrite) -> type[_Table]:
    """A table whose transactions pass every operation through ``rewrite`` (None: the
    operation is left out, and the others still commit together)."""

    class Rewriting(_Table):
        async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
            changed = [rewrite(op) for op in operations]
            kept = [op for op in changed if op is not None]
            if not kept:
                return [None] * len(operations)
            etags = iter(await self.inner.transact(kept))
            return [None if op is None else next(etags) for op in changed]

    return Rewriting


def _leave_out(*prefixes: str) -> Rewrite:
    def rewrite(op: TableOperation) -> TableOperation | None:
        return None if operation_key(op)[1].startswith(prefixes) else op

    return rewrite


def _state_without_outbox_map(op: TableOperation) -> TableOperation | None:
    if isinstance(op, Delete) or op.entity.row_key != STATE_ROW:
        return op
    if "outbox_parts" not in op.entity.properties:
        return op
    emptied = dataclasses.replace(StateEntity.from_entity(op.entity), entries={})
    return dataclasses.replace(op, entity=emptied.to_entity(1 << 30))


def _state_left_out(op: TableOperation) -> TableOperation | None:
    return None if operation_key(op)[1] == STATE_ROW else op


def _signals_unrecorded(op: TableOperation) -> TableOperation | None:
    if isinstance(op, Delete) or not op.entity.row_key.startswith(PROCESSED_PREFIX):
        return op
    entity = op.entity
    emptied = Entity(entity.partition_key, entity.row_key, {**entity.properties, "outgoing": "[]"})
    return dataclasses.replace(op, entity=emptied)


def _commit_variant(name: str, rule: str, mode: Mode, rewrite: Rewrite) -> Variant:
    table = _rewriting(rewrite)
    return Variant(name, rule, wrap=lambda account: _Account(account, table=table), modes=(mode,))


NO_PROCESSED_ROW = _commit_variant(
    "no-processed-row",
    "processed_messages: processed|{m} commits with the state",
    "processed_messages",
    _leave_out(PROCESSED_PREFIX),
)
NO_PROCESSED_OR_AUDIT_ROW = _commit_variant(
    "no-processed-or-audit-row",
    "processed_messages: processed|{m} commits with the state, and so does audit|{m}, whose "
    "insert otherwise stops a second commit",
    "processed_messages",
    _leave_out(PROCESSED_PREFIX, AUDIT_PREFIX),
)
NO_STATE_WITH_RECORD = _commit_variant(
    "no-state-with-record",
    "processed_messages: the state change commits with processed|{m}",
    "processed_messages",
    _state_left_out,
)
SIGNALS_UNRECORDED = _commit_variant(
    "signals-unrecorded",
    "processed_messages: processed|{m} records the signals its commit created",
    "processed_messages",
    _signals_unrecorded,
)
NO_INDEX_ROW = _commit_variant(
    "no-index-row",
    "state_based: msgidx|{m} commits with the version",
    "state_based",
    _leave_out(INDEX_PREFIX),
)
NO_VERSION_ROW = _commit_variant(
    "no-version-row",
    "state_based: version|{n} commits with the state row",
    "state_based",
    _leave_out(VERSION_PREFIX),
)
NO_OUTBOX_ENTRY = _commit_variant(
    "no-outbox-entry",
    "entity_outbox: the entry for m commits inside the state row",
    "entity_outbox",
    _state_without_outbox_map,
)


@contextlib.contextmanager
def _retention_keeps_everything() -> Iterator[None]:
    """Every mode's expiry is asked for the records older than the beginning of time."""
    original = dict(cleanup_tasks._MODE_EXPIRY)
    never = datetime.min.replace(tzinfo=UTC)

    def keeping(expire: cleanup_tasks.Expiry) -> cleanup_tasks.Expiry:
        async def expire_nothing(table: Table, **kwargs: Any) -> tuple[int, str | None]:
            return await expire(table, **{**kwargs, "older_than": never})

        return expire_nothing

    for mode, (kind, expire, retention) in original.items():
        cleanup_tasks._MODE_EXPIRY[mode] = (kind, keeping(expire), retention)
    try:
        yield
    finally:
        cleanup_tasks._MODE_EXPIRY.update(original)


NO_RETENTION = Variant(
    "no-retention",
    "window modes: the cleanup removes dedup records older than the retention period",
    patch=_retention_keeps_everything,
    modes=("processed_messages", "state_based", "entity_outbox"),
)

VARIANTS = {
    v.name: v
    for v in (
        NO_CLAIM,
        NO_OUTBOX_IN_COMMIT,
        DELETE_BEFORE_SEND,
        REUSED_ATTEMPT_ID,
        NO_PROCESSED_ROW,
        NO_PROCESSED_OR_AUDIT_ROW,
        NO_STATE_WITH_RECORD,
        SIGNALS_UNRECORDED,
        NO_INDEX_ROW,
        NO_VERSION_ROW,
        NO_OUTBOX_ENTRY,
        NO_RETENTION,
    )
}
