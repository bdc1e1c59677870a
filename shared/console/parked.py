"""Every parked message of an endpoint, read by one pass at a time per poison queue.

Reading a poison queue deeper than 32 messages receives them, hiding each for a short while
(``shared.bus.parked_pass``): two passes at once would each see only what the other had not
hidden. So this server runs one pass at a time per queue (listing, finding, replaying and
discarding alike hold the queue's lock), and keeps what a listing pass found for
``LIST_SECONDS``: a first page reads the queue afresh, and the pages after it are cut from
that pass while it is recent, so paging through a queue costs one pass. An action forgets
what was kept. The lock is this process's: two servers (or a server and
``bus poison list``) may still overlap, and then see a partial list for one pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from shared.bus.parked_pages import parked_page
from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount

LIST_SECONDS = 60.0


@dataclass(frozen=True)
class Entries:
    """What one listing pass found of a poison queue."""

    entries: list[dict[str, Any]]
    """Its messages as listed (``parked_entry``), in queue message id order."""
    complete: bool
    """The pass looked at every message (``shared.bus.parked_pass``)."""


class ParkedQueues:
    """The poison queues of one console, each read by one pass at a time, each pass reading
    at most ``limit`` messages (``BUS_CONSOLE_LIST_LIMIT``)."""

    def __init__(self, account: StorageAccount, limit: int) -> None:
        self.account = account
        self.limit = limit
        self._locks: dict[str, asyncio.Lock] = {}
        self._kept: dict[str, tuple[float, Entries]] = {}

    @asynccontextmanager
    async def passing(self, endpoint: str) -> AsyncIterator[None]:
        """Hold ``endpoint``'s poison queue for one pass that only looks."""
        async with self._locks.setdefault(endpoint, asyncio.Lock()):
            yield

    @asynccontextmanager
    async def changing(self, endpoint: str) -> AsyncIterator[None]:
        """Hold ``endpoint``'s poison queue for an action, and forget what a listing kept."""
        async with self.passing(endpoint):
            try:
                yield
            finally:
                self._kept.pop(endpoint, None)

    async def entries(self, endpoint: str, *, fresh: bool) -> Entries:
        """The parked messages of ``endpoint`` as one pass found them: read afresh, or
        (``fresh`` false) as a recent pass found them."""
        async with self.passing(endpoint):
            kept = self._kept.get(endpoint)
            if not fresh and kept is not None and time.monotonic() - kept[0] < LIST_SECONDS:
                return kept[1]
            queue = self.account.queue(poison_queue(endpoint))
            try:
                page = await parked_page(queue, endpoint, limit=self.limit)
            except NotFound:
                return Entries([], complete=True)
            found = Entries(page.entries, page.complete)
            self._kept[endpoint] = (time.monotonic(), found)
            return found
