"""Storage wrappers that make delivery worse on purpose, for the demo and soak runs."""

from __future__ import annotations

import random

from shared.stores.account import StorageAccount
from shared.stores.delegating import DelegatingAccount, DelegatingQueue
from shared.stores.queue import MessageQueue


class DuplicatingAccount(DelegatingAccount):
    """Sends every queue message a second time with probability ``rate`` (seeded), the way an
    at-least-once transport may. Blob and table access pass straight through."""

    def __init__(self, inner: StorageAccount, rate: float, seed: int = 7) -> None:
        super().__init__(inner)
        self.rate = rate
        self.random = random.Random(seed)
        self.sent = 0
        self.duplicated = 0

    def queue(self, name: str) -> MessageQueue:
        return _DuplicatingQueue(self.inner.queue(name), self)


class _DuplicatingQueue(DelegatingQueue):
    def __init__(self, inner: MessageQueue, owner: DuplicatingAccount) -> None:
        super().__init__(inner)
        self._owner = owner

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        message_id = await self.inner.send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )
        self._owner.sent += 1
        if self._owner.random.random() < self._owner.rate:
            self._owner.duplicated += 1
            await self.inner.send(
                content, visibility_delay=visibility_delay, time_to_live=time_to_live
            )
        return message_id
