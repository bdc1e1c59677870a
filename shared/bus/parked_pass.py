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

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.bus.poison import PassedOver
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
    passed = PassedOver()
    kept: list[T] = []
    deadline = time.monotonic() + PASS_SECONDS
    try:
        while True:
            if limit is not None and len(passed.seen) >= limit:
                return Looked(kept, complete=not await queue.peek(1))
            if time.monotonic() > deadline:
                return Looked(kept, complete=False)
            wanted = PEEK_LIMIT if limit is None else min(PEEK_LIMIT, limit - len(passed.seen))
            batch = await queue.receive(wanted, visibility_timeout=LOOK_SECONDS)
            if not batch:
                return Looked(kept, complete=True)
            for message in passed.unseen(batch):  # a message seen before: its new receipt
                passed.hold(message)
                kept += _kept([message], keep)
    finally:
        await passed.release(queue)


def _kept(messages: list[QueueMessage], keep: Callable[[QueueMessage], T | None]) -> list[T]:
    return [found for found in map(keep, messages) if found is not None]
