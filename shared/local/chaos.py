"""Storage wrappers that make delivery worse on purpose, for the demo and soak runs."""

from __future__ import annotations

import random

from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.queue import MessageQueue, QueueMessage
from shared.stores.table import Table


class DuplicatingAccount(StorageAccount):
    """Sends every queue message a second time with probability ``rate`` (seeded), the way an
    at-least-once transport may. Blob and table access pass straight through."""

    def __init__(self, inner: StorageAccount, rate: float, seed: int = 7) -> None:
        self.inner = inner
        self.rate = rate
        self.random = random.Random(seed)
        self.sent = 0
        self.duplicated = 0

    def blob_container(self, name: str) -> BlobContainer:
        return self.inner.blob_container(name)

    def table(self, name: str) -> Table:
        return self.inner.table(name)

    def queue(self, name: str) -> MessageQueue:
        return _DuplicatingQueue(self.inner.queue(name), self)

    async def close(self) -> None:
        await self.inner.close()


class _DuplicatingQueue(MessageQueue):
    def __init__(self, inner: MessageQueue, owner: DuplicatingAccount) -> None:
        self._inner = inner
        self._owner = owner
        self.name = inner.name

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        message_id = await self._inner.send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )
        self._owner.sent += 1
        if self._owner.random.random() < self._owner.rate:
            self._owner.duplicated += 1
            await self._inner.send(
                content, visibility_delay=visibility_delay, time_to_live=time_to_live
            )
        return message_id

    async def create_if_missing(self) -> None:
        await self._inner.create_if_missing()

    async def delete_queue(self) -> None:
        await self._inner.delete_queue()

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        return await self._inner.receive(max_messages, visibility_timeout=visibility_timeout)

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        await self._inner.delete(message_id, pop_receipt)

    async def update(
        self,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_timeout: float,
        content: str | None = None,
    ) -> str:
        return await self._inner.update(
            message_id, pop_receipt, visibility_timeout=visibility_timeout, content=content
        )

    async def peek(self, max_messages: int = 32) -> list[QueueMessage]:
        return await self._inner.peek(max_messages)

    async def approximate_count(self) -> int:
        return await self._inner.approximate_count()

    async def clear(self) -> None:
        await self._inner.clear()
