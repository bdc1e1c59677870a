"""Keeping a pass's task leases alive while it works, so that leases can be short.

A lease has to outlast the work between two renewals. Renewing only at checkpoints would tie
the lease to the slowest page; a heartbeat renews every held lease every third of the lease
period instead, so a lease of about 30 s holds however long a page takes, and an instance
that dies loses its tasks within those 30 s. Page checkpoints and heartbeats write the same
row, so ``HeldLease`` orders them: each write carries the ETag of the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from shared.cleanup.checkpoint import Checkpoint, Checkpoints, LeaseLost
from shared.errors import BusError

log = logging.getLogger(__name__)


class HeldLease:
    """This instance's lease on one task, written by its pages and by the heartbeat."""

    def __init__(self, checkpoints: Checkpoints, checkpoint: Checkpoint) -> None:
        self._checkpoints = checkpoints
        self.checkpoint = checkpoint
        self._lock = asyncio.Lock()
        self._lost = False
        self._released = False

    async def advance(self, continuation: str | None, now: datetime) -> None:
        """Save where the task is; LeaseLost if another instance took it over."""
        async with self._lock:
            if self._lost:
                raise LeaseLost(f"cleanup task {self.checkpoint.task} was taken over")
            self.checkpoint = await self._checkpoints.advance(self.checkpoint, continuation, now)

    async def release(self, continuation: str | None, now: datetime) -> None:
        """Save where the task is and let the lease go (None: a sweep finished)."""
        async with self._lock:
            self._released = True
            if self._lost:
                raise LeaseLost(f"cleanup task {self.checkpoint.task} was taken over")
            self.checkpoint = await self._checkpoints.release(self.checkpoint, continuation, now)

    async def renew(self, now: datetime) -> None:
        """Extend the lease, keeping the saved continuation. A failed write is retried at
        the next beat; a lease taken over is marked lost and the task stops at its next page."""
        async with self._lock:
            if self._lost or self._released:
                return
            try:
                self.checkpoint = await self._checkpoints.advance(
                    self.checkpoint, self.checkpoint.continuation, now
                )
            except LeaseLost:
                self._lost = True
            except BusError as e:
                log.warning("cleanup task %s: lease renewal failed: %s", self.checkpoint.task, e)


class Heartbeat:
    def __init__(self, checkpoints: Checkpoints, now: Callable[[], datetime]) -> None:
        self._checkpoints = checkpoints
        self._now = now
        self._held: list[HeldLease] = []
        self.interval = checkpoints.lease.total_seconds() / 3

    def hold(self, checkpoint: Checkpoint) -> HeldLease:
        lease = HeldLease(self._checkpoints, checkpoint)
        self._held.append(lease)
        return lease

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            for lease in list(self._held):
                await lease.renew(self._now())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Heartbeat]:
        beating = asyncio.create_task(self._beat())
        try:
            yield self
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
