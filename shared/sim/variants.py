"""Known-bad variants of the pipeline: each removes one rule of design notes section 3, and
the simulator must find the violation that rule prevents. They prove the checker can fail.

The pipeline code itself is not edited: a variant either wraps the stores the bus uses or
swaps one module-level name that ``shared.bus.receiver`` calls, for the duration of a run.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import shared.bus.outgoing as outgoing
import shared.bus.receiver as receiver
from shared.bus.envelope import Envelope, token_name
from shared.bus.records import OUTBOX_PREFIX, OutgoingSignal
from shared.errors import AlreadyExists, NotFound, OutcomeUnknown
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob, BlobContainer, BlobProperties
from shared.stores.queue import MessageQueue
from shared.stores.table import Entity, Page, Table, TableOperation, Update, operation_key

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

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        if self.patch is None:
            yield
            return
        with self.patch():
            yield


class _Blobs(BlobContainer):
    """Passes every call to ``inner``; variants override what they change."""

    def __init__(self, inner: BlobContainer) -> None:
        self.inner = inner
        self.name = inner.name

    async def create_if_missing(self) -> None:
        await self.inner.create_if_missing()

    async def delete_container(self) -> None:
        await self.inner.delete_container()

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        return await self.inner.create(name, data, metadata)

    async def read(self, name: str) -> Blob:
        return await self.inner.read(name)

    async def get_properties(self, name: str) -> BlobProperties:
        return await self.inner.get_properties(name)

    async def upload(
        self,
        name: str,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
    ) -> str:
        return await self.inner.upload(name, data, metadata, etag=etag)

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        return await self.inner.set_metadata(name, metadata, etag=etag)

    async def delete(self, name: str, *, etag: str | None = None) -> None:
        await self.inner.delete(name, etag=etag)

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        async for item in self.inner.list(prefix):
            yield item


class _Table(Table):
    def __init__(self, inner: Table) -> None:
        self.inner = inner
        self.name = inner.name

    async def create_if_missing(self) -> None:
        await self.inner.create_if_missing()

    async def delete_table(self) -> None:
        await self.inner.delete_table()

    async def get(self, partition_key: str, row_key: str) -> Entity:
        return await self.inner.get(partition_key, row_key)

    async def query(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
        continuation: str | None = None,
    ) -> Page:
        return await self.inner.query(
            partition_key=partition_key,
            row_key_prefix=row_key_prefix,
            row_keys=row_keys,
            page_size=page_size,
            continuation=continuation,
        )

    async def insert(self, entity: Entity) -> str:
        return await self.inner.insert(entity)

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        return await self.inner.update(entity, etag=etag)

    async def upsert(self, entity: Entity) -> str:
        return await self.inner.upsert(entity)

    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        await self.inner.delete(partition_key, row_key, etag=etag)

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        return await self.inner.transact(operations)


class _Account(StorageAccount):
    def __init__(
        self,
        inner: StorageAccount,
        blobs: type[_Blobs] = _Blobs,
        table: type[_Table] = _Table,
    ) -> None:
        self.inner = inner
        self._blobs = blobs
        self._table = table

    def blob_container(self, name: str) -> BlobContainer:
        return self._blobs(self.inner.blob_container(name))

    def table(self, name: str) -> Table:
        return self._table(self.inner.table(name))

    def queue(self, name: str) -> MessageQueue:
        return self.inner.queue(name)


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
            name = token_name(sender, incoming_id, attempt_id, envelope.id)
            for _try in range(config.max_create_attempts):
                try:
                    await tokens.create(name, envelope.to_bytes(), metadata)
                except AlreadyExists:
                    break  # "must be ours from the earlier try": the unsafe assumption
                except OutcomeUnknown:
                    continue  # retried with the same attempt id
                break
            result.committed_candidates.append(
                OutgoingSignal(
                    destination=envelope.destination,
                    message_id=envelope.id,
                    attempt_id=attempt_id,
                    token=name,
                    partition_key=envelope.partition_key,
                    type=envelope.type,
                )
            )
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

VARIANTS = {
    v.name: v for v in (NO_CLAIM, NO_OUTBOX_IN_COMMIT, DELETE_BEFORE_SEND, REUSED_ATTEMPT_ID)
}
