"""Where a cleanup bench pass spends its time: per kind of storage request, and CPU.

The requests of a pass run concurrently, so a kind's summed seconds include the time its
requests waited behind the others: they show where the pass waits, not what each request
costs the server alone. The emulator's CPU seconds (read from ``/proc``, Linux only) and the
client's say which side is the limit on a machine where both share the cores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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


@dataclass
class RequestTimes:
    """Per request kind ('blob.list', 'table.delete', ...): how many, and their seconds."""

    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    async def timed(self, kind: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.monotonic()
        try:
            return await call()
        finally:
            self.calls[kind] = self.calls.get(kind, 0) + 1
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.monotonic() - started

    def lines(self) -> list[str]:
        kinds = sorted(self.calls, key=lambda k: -self.seconds[k])
        return [
            f"    {kind:<20} {self.calls[kind]:>6} requests  "
            f"{1000 * self.seconds[kind] / self.calls[kind]:8.1f} ms each, in flight"
            for kind in kinds
        ]


class TimedAccount(DelegatingAccount):
    def __init__(self, inner: StorageAccount, times: RequestTimes) -> None:
        super().__init__(inner)
        self.times = times

    def blob_container(self, name: str) -> BlobContainer:
        return _Blobs(self.inner.blob_container(name), self.times)

    def table(self, name: str) -> Table:
        return _Table(self.inner.table(name), self.times)

    def queue(self, name: str) -> MessageQueue:
        return _Queue(self.inner.queue(name), self.times)


class _Blobs(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, times: RequestTimes) -> None:
        super().__init__(inner)
        self._times = times

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._times.timed(kind, call)


class _Table(DelegatingTable):
    def __init__(self, inner: Table, times: RequestTimes) -> None:
        super().__init__(inner)
        self._times = times

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._times.timed(kind, call)


class _Queue(DelegatingQueue):
    def __init__(self, inner: MessageQueue, times: RequestTimes) -> None:
        super().__init__(inner)
        self._times = times

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._times.timed(kind, call)


def process_cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU seconds of process ``pid`` so far (None where /proc cannot say)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
