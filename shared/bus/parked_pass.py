"""One pass over a poison queue that looks at its messages and takes none, bounded in what it
holds, in how many it reads and in time.

A queue shows at most ``PEEK_LIMIT`` messages without receiving them; deeper ones are received,
each hidden for ``LOOK_SECONDS``, and made visible again at the end of the pass
(``PassedOver``). Anyone who may send to a poison queue can fill it with large entries, so a
pass keeps only what ``keep`` makes of each message (a listed entry, not its content) and holds
one batch of contents at a time. It stops:

- when the queue is exhausted (a receive finds nothing): it saw every message, ``complete``;
- after ``limit`` messages (``BUS_CONSOLE_LIST_LIMIT``): ``complete`` unless one is still
  visible;
- when ``PASS_SECONDS`` have passed: ``complete`` false. The first messages it hid become
  visible again after ``LOOK_SECONDS``; a pass running longer would receive them again and
  could no longer tell a message it has not seen from one it has.

A batch of messages the pass has already seen does not end it: the queue may hand out a
message again (its hold ran out) while others it has never shown wait behind it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.errors import NotFound
from shared.stores.queue import MessageQueue, QueueMessage

T = TypeVar("T")

PEEK_LIMIT = 32
"""A queue shows at most this many messages without receiving them."""
LOOK_SECONDS = 30
"""How long a message deeper in a poison queue is hidden while it is looked at (it is made
visible again as soon as the look ends)."""
PASS_SECONDS = LOOK_SECONDS / 2
"""The longest a pass goes on: well before the first message it hid shows again."""


@dataclass(frozen=True)
class Looked(Generic[T]):
    kept: list[T]
    """What ``keep`` made of each message looked at, in the order the queue gave them."""
    complete: bool
    """Every message of the queue was looked at."""


async def look_through(
    queue: MessageQueue, keep: Callable[[QueueMessage], T | None], *, limit: int | None
) -> Looked[T]:
    """``keep`` of each message of ``queue`` (those it makes None are dropped), at most
    ``limit`` messages looked at (None: as many as the time allows); nothing is taken."""
    peeked = await queue.peek(PEEK_LIMIT)
    if len(peeked) < PEEK_LIMIT and (limit is None or len(peeked) <= limit):
        return Looked(_kept(peeked, keep), complete=True)  # all of them: none is hidden
    kept: list[T] = []

    async def look(message: QueueMessage) -> bool:
        nonlocal kept
        kept += _kept([message], keep)
        return False

    complete = await walk(queue, look, limit=limit)
    return Looked(kept, complete)


async def walk(
    queue: MessageQueue,
    visit: Callable[[QueueMessage], Awaitable[bool]],
    *,
    limit: int | None,
    enough: Callable[[], bool] | None = None,
) -> bool:
    """Hand each message of ``queue`` to ``visit`` once, received and hidden for
    ``LOOK_SECONDS``: ``visit`` returns True when it took the message (deleted it), and every
    other is made visible again at the end of the pass. At most ``limit`` messages are
    visited (None: as many as the time allows); ``enough`` ends the pass early once it says
    so (a replay that moved as many as it was asked to). Returns whether every message of
    the queue was visited (``complete``)."""
    passed = PassedOver()
    deadline = time.monotonic() + PASS_SECONDS
    visited = 0
    left_over = False
    """A message received but not visited: the pass stopped within its batch."""
    try:
        while True:
            if time.monotonic() > deadline:
                return False
            if _stop(visited, limit, enough):
                return not left_over and not await queue.peek(1)
            wanted = PEEK_LIMIT if limit is None else min(PEEK_LIMIT, limit - visited)
            batch = await queue.receive(wanted, visibility_timeout=LOOK_SECONDS)
            if not batch:
                return True
            for message in passed.unseen(batch):  # a message seen before: its new receipt
                if _stop(visited, limit, enough) or time.monotonic() > deadline:
                    left_over = True
                    passed.hold(message)
                    continue
                visited += 1
                if not await visit(message):
                    passed.hold(message)
    finally:
        await passed.release(queue)


def _stop(visited: int, limit: int | None, enough: Callable[[], bool] | None) -> bool:
    return (limit is not None and visited >= limit) or (enough is not None and enough())


def _kept(messages: list[QueueMessage], keep: Callable[[QueueMessage], T | None]) -> list[T]:
    return [found for found in map(keep, messages) if found is not None]


class PassedOver:
    """The poison messages a pass receives and leaves where they are (not selected, only
    counted by a dry run, or skipped): remembered so that the pass does not take them twice,
    and made visible again at its end. Only each one's id and pop receipt are kept, never its
    content: a pass over a queue of large entries holds one batch of them at a time."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}
        """Queue message id -> its latest pop receipt."""
        self.seen: set[str] = set()

    def unseen(self, batch: list[QueueMessage]) -> list[QueueMessage]:
        for message in batch:
            if message.id in self.held:
                self.held[message.id] = message.pop_receipt  # received again: its new receipt
        fresh = [m for m in batch if m.id not in self.seen]
        self.seen.update(m.id for m in batch)
        return fresh

    def hold(self, message: QueueMessage) -> None:
        self.held[message.id] = message.pop_receipt

    async def release(self, poison: MessageQueue) -> None:
        for message_id, pop_receipt in self.held.items():
            with contextlib.suppress(NotFound):
                await poison.update(message_id, pop_receipt, visibility_timeout=0)
