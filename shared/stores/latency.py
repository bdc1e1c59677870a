"""A store wrapper that adds a fixed delay to every storage request.

The in-memory stores answer at once, and Azurite on one machine is limited by its own CPU, so
neither shows what a job costs against Azure, where each request is a network round trip of
several milliseconds. Wrapping an account in ``LatencyAccount`` makes every request (as
``shared.stores.delegating`` counts them) wait ``seconds`` before it is made, concurrently with
the others in flight, which is how round trips behave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.delegating import (
    DelegatingAccount,
    DelegatingBlobContainer,
    DelegatingQueue,
    DelegatingTable,
)
from shared.stores.queue import MessageQueue
from shared.stores.table import Table

T = TypeVar("T")


class LatencyAccount(DelegatingAccount):
    def __init__(self, inner: StorageAccount, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"latency must be a non-negative number of seconds: {seconds}")
        super().__init__(inner)
        self.seconds = seconds

    def blob_container(self, name: str) -> BlobContainer:
        return _Blobs(self.inner.blob_container(name), self.seconds)

    def table(self, name: str) -> Table:
        return _Table(self.inner.table(name), self.seconds)

    def queue(self, name: str) -> MessageQueue:
        return _Queue(self.inner.queue(name), self.seconds)


async def _delayed(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    await asyncio.sleep(seconds)
    return await call()


class _Blobs(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, seconds: float) -> None:
        super().__init__(inner)
        self._seconds = seconds

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await _delayed(self._seconds, call)


class _Table(DelegatingTable):
    def __init__(self, inner: Table, seconds: float) -> None:
        super().__init__(inner)
        self._seconds = seconds

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await _delayed(self._seconds, call)


class _Queue(DelegatingQueue):
    def __init__(self, inner: MessageQueue, seconds: float) -> None:
        super().__init__(inner)
        self._seconds = seconds

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await _delayed(self._seconds, call)
