"""A worker-wide budget for the message bodies held in memory at once (issue 42).

A worker runs many invocations at once (host.json lets 24 messages of each queue run per
instance, and HTTP requests come in parallel), and each holds its body several times over
while it runs: the downloaded bytes, the parsed JSON, the message model, the envelope of
each output. Without a bound, a backlog of large messages or a client posting in parallel
takes a 2 GB worker down, and every invocation on it.

So every body is counted against ``BUS_BODY_BUDGET_BYTES`` before it is downloaded or
parsed, and released once its invocation is over:

- the receiver takes the size of a shared payload before reading it (its reference names
  the size), and, before reading a token whose size it cannot know (no envelope copy in the
  signal), the largest a token can be; once read, the token holds its real size only;
- the HTTP ingress takes a request's size before parsing it, or answers 503 with
  ``Retry-After`` (``shared.http_ingress``).

The budget counts body bytes, not the process's memory: each byte counted stands for the
few copies its invocation makes (docs/benchmarks.md measures the multiple). One body larger
than the whole budget takes all of it, so it still runs, alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from shared.errors import BusError


class BodyBudget:
    """Bytes of bodies held by one worker's invocations, at most ``capacity`` at once.

    ``peak`` is the most ever held, for the tests and the benchmark: the accounting is the
    budget's own, so what it reports is what it enforced."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self.peak = 0
        self._changed = asyncio.Condition()

    def _fits(self, size: int) -> bool:
        return self.held + size <= self.capacity

    def try_take(self, size: int) -> bool:
        """Take ``size`` bytes now if they fit; False (nothing taken) if not."""
        size = min(size, self.capacity)
        if not self._fits(size):
            return False
        self._add(size)
        return True

    async def take(self, size: int, wait_seconds: float) -> bool:
        """Take ``size`` bytes, waiting at most ``wait_seconds`` for them to fit; False
        (nothing taken) if they did not."""
        size = min(size, self.capacity)
        if self._fits(size):
            self._add(size)
            return True
        try:
            async with self._changed, asyncio.timeout(wait_seconds):
                await self._changed.wait_for(lambda: self._fits(size))
                self._add(size)
        except TimeoutError:
            return False
        return True

    def _add(self, size: int) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)

    def grow(self, size: int) -> None:
        """Count ``size`` more bytes at once, room or not: bytes already in memory (a token
        larger than its reservation), which refusing would not give back."""
        self._add(size)

    async def release(self, size: int) -> None:
        """Give back ``size`` bytes taken earlier, waking the invocations waiting for room."""
        if size <= 0:
            return
        self.held -= size
        async with self._changed:
            self._changed.notify_all()


@dataclass
class Holding:
    """What one invocation holds of the budget, by what it is for (``token``, ``payload``):
    taking a slot again (a token read again after a failed claim) replaces what it held."""

    budget: BodyBudget
    slots: dict[str, int] = field(default_factory=dict)

    async def take(self, slot: str, size: int, wait_seconds: float) -> bool:
        """Hold ``size`` bytes for ``slot`` instead of what it held; False if they did not
        fit within ``wait_seconds`` (the slot then holds nothing)."""
        await self.budget.release(self.slots.pop(slot, 0))
        if not await self.budget.take(size, wait_seconds):
            return False
        self.slots[slot] = min(size, self.budget.capacity)
        return True

    async def resize(self, slot: str, size: int) -> None:
        """``slot`` holds ``size`` bytes from now on, without waiting: a reservation made for
        the largest size, now that the real one is known. A size above the reservation
        (a sender with a larger limit) is counted as it is."""
        held = self.slots.get(slot, 0)
        if size < held:
            await self.budget.release(held - size)
        elif size > held:
            self.budget.grow(size - held)
        self.slots[slot] = size

    async def release_all(self) -> None:
        for size in self.slots.values():
            await self.budget.release(size)
        self.slots.clear()


class RequestGate:
    """At most ``limit`` requests in progress at once; one beyond is refused, not queued (a
    client told to retry later costs nothing, a queued request holds its body)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.peak = 0

    def try_enter(self) -> bool:
        if self.active >= self.limit:
            return False
        self.active += 1
        self.peak = max(self.peak, self.active)
        return True

    def leave(self) -> None:
        self.active -= 1


class BodyBudgetExhausted(BusError):
    """No room in the worker's body budget came within the wait: the receiver postpones
    the message (``Outcome.POSTPONED``); it is no failure of the message's."""
