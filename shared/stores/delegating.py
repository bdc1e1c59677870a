"""Store wrappers that pass every call to the store they wrap.

Wrappers that change one behaviour (the demo's duplicating queue, the simulator's known-bad
variants) subclass these and override only that behaviour, so a method added to a store
interface is forwarded everywhere by adding it here once. Every storage request goes through
``_call(kind, target, call)`` with its kind ('blob.create', 'table.transact', ...) and what
it addresses: the instrumented wrappers override that one method to count and fault them.
Creating and deleting the container, table or queue itself is not a request of the pipeline
and passes straight through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from shared.stores.account import StorageAccount
from shared.stores.blob import Blob, BlobContainer, BlobPage, BlobProperties
from shared.stores.queue import MessageQueue, QueueMessage
from shared.stores.table import Entity, Page, Table, TableOperation

T = TypeVar("T")


class _Forwarding:
    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        """One storage request of ``kind`` on ``target``; by default just made."""
        return await call()


class DelegatingBlobContainer(_Forwarding, BlobContainer):
    def __init__(self, inner: BlobContainer) -> None:
        self.inner = inner
        self.name = inner.name

    def _target(self, blob: str) -> str:
        return f"{self.name}/{blob}"

    async def create_if_missing(self) -> None:
        await self.inner.create_if_missing()

    async def delete_container(self) -> None:
        await self.inner.delete_container()

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        return await self._call(
            "blob.create", self._target(name), lambda: self.inner.create(name, data, metadata)
        )

    async def read(self, name: str) -> Blob:
        return await self._call("blob.read", self._target(name), lambda: self.inner.read(name))

    async def read_range(self, name: str, offset: int, length: int, *, etag: str) -> bytes:
        return await self._call(
            "blob.read",
            self._target(name),
            lambda: self.inner.read_range(name, offset, length, etag=etag),
        )

    async def get_properties(self, name: str) -> BlobProperties:
        return await self._call(
            "blob.get_properties", self._target(name), lambda: self.inner.get_properties(name)
        )

    async def upload(
        self,
        name: str,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
    ) -> str:
        return await self._call(
            "blob.upload",
            self._target(name),
            lambda: self.inner.upload(name, data, metadata, etag=etag),
        )

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        return await self._call(
            "blob.set_metadata",
            self._target(name),
            lambda: self.inner.set_metadata(name, metadata, etag=etag),
        )

    async def delete(self, name: str, *, etag: str | None = None) -> None:
        await self._call(
            "blob.delete", self._target(name), lambda: self.inner.delete(name, etag=etag)
        )

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        return await self._call(
            "blob.delete_batch", self._target(""), lambda: self.inner.delete_unchanged(blobs)
        )

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        # One request as far as _call is concerned: the listing is collected first.
        async def collect() -> list[BlobProperties]:
            return [p async for p in self.inner.list(prefix)]

        for item in await self._call("blob.list", self._target(prefix), collect):
            yield item

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        return await self._call(
            "blob.list",
            self._target(prefix),
            lambda: self.inner.list_page(prefix, page_size=page_size, continuation=continuation),
        )


class DelegatingTable(_Forwarding, Table):
    def __init__(self, inner: Table) -> None:
        self.inner = inner
        self.name = inner.name

    def _target(self, partition_key: str, row_key: str) -> str:
        return f"{self.name}/{partition_key}/{row_key}"

    async def create_if_missing(self) -> None:
        await self.inner.create_if_missing()

    async def delete_table(self) -> None:
        await self.inner.delete_table()

    async def get(self, partition_key: str, row_key: str) -> Entity:
        return await self._call(
            "table.get",
            self._target(partition_key, row_key),
            lambda: self.inner.get(partition_key, row_key),
        )

    async def query(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
        continuation: str | None = None,
    ) -> Page:
        return await self._call(
            "table.query",
            f"{self.name}/{partition_key or '*'}",
            lambda: self.inner.query(
                partition_key=partition_key,
                row_key_prefix=row_key_prefix,
                row_keys=row_keys,
                page_size=page_size,
                continuation=continuation,
            ),
        )

    async def insert(self, entity: Entity) -> str:
        return await self._call(
            "table.insert",
            self._target(entity.partition_key, entity.row_key),
            lambda: self.inner.insert(entity),
        )

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        return await self._call(
            "table.update",
            self._target(entity.partition_key, entity.row_key),
            lambda: self.inner.update(entity, etag=etag),
        )

    async def upsert(self, entity: Entity) -> str:
        return await self._call(
            "table.upsert",
            self._target(entity.partition_key, entity.row_key),
            lambda: self.inner.upsert(entity),
        )

    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        await self._call(
            "table.delete",
            self._target(partition_key, row_key),
            lambda: self.inner.delete(partition_key, row_key, etag=etag),
        )

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        return await self._call(
            "table.transact", self.name, lambda: self.inner.transact(operations)
        )


class DelegatingQueue(_Forwarding, MessageQueue):
    def __init__(self, inner: MessageQueue) -> None:
        self.inner = inner
        self.name = inner.name

    async def create_if_missing(self) -> None:
        await self.inner.create_if_missing()

    async def delete_queue(self) -> None:
        await self.inner.delete_queue()

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        return await self._call(
            "queue.send",
            self.name,
            lambda: self.inner.send(
                content, visibility_delay=visibility_delay, time_to_live=time_to_live
            ),
        )

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        return await self._call(
            "queue.receive",
            self.name,
            lambda: self.inner.receive(max_messages, visibility_timeout=visibility_timeout),
        )

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        await self._call(
            "queue.delete", self.name, lambda: self.inner.delete(message_id, pop_receipt)
        )

    async def update(
        self,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_timeout: float,
        content: str | None = None,
    ) -> str:
        return await self._call(
            "queue.update",
            self.name,
            lambda: self.inner.update(
                message_id, pop_receipt, visibility_timeout=visibility_timeout, content=content
            ),
        )

    async def peek(self, max_messages: int = 32) -> list[QueueMessage]:
        return await self._call("queue.peek", self.name, lambda: self.inner.peek(max_messages))

    async def approximate_count(self) -> int:
        return await self._call("queue.count", self.name, self.inner.approximate_count)

    async def clear(self) -> None:
        await self.inner.clear()


class DelegatingAccount(StorageAccount):
    def __init__(self, inner: StorageAccount) -> None:
        self.inner = inner

    def blob_container(self, name: str) -> BlobContainer:
        return self.inner.blob_container(name)

    def table(self, name: str) -> Table:
        return self.inner.table(name)

    def queue(self, name: str) -> MessageQueue:
        return self.inner.queue(name)

    async def close(self) -> None:
        await self.inner.close()
