"""Every parked message of a poison queue, page by page, looked at and not taken.

A queue shows at most ``PEEK_LIMIT`` messages without receiving them. A deeper page is read in
one pass that receives the queue's messages, each hidden for ``LOOK_SECONDS``, and makes them
all visible again at the end of the pass (``poison_view.received_all``): nothing is deleted,
nothing is listed twice in a pass. A queue hands its messages out in no order that survives
a pass (the ones a pass made visible again come after the rest), so every pass reads the
whole queue and pages are cut from it sorted by queue message id, an order every pass agrees
on: a page after ``skip`` is the same one on every pass while the queue is not changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.bus.poison_view import PEEK_LIMIT, received_all
from shared.stores.queue import MessageQueue, QueueMessage


@dataclass(frozen=True)
class ParkedPage:
    messages: list[QueueMessage]
    more: bool
    """Messages wait beyond this page."""


async def parked_page(queue: MessageQueue, *, skip: int = 0, size: int | None = None) -> ParkedPage:
    """The parked messages after the first ``skip``, at most ``size`` of them (all with None)."""
    if skip < 0 or (size is not None and size < 1):
        raise ValueError("a page skips zero or more messages and holds at least one")
    peeked = await queue.peek(PEEK_LIMIT)
    if len(peeked) < PEEK_LIMIT:  # all of them: no need to hide any
        return _cut(peeked, skip, size)
    return _cut(await received_all(queue), skip, size)


def _cut(messages: list[QueueMessage], skip: int, size: int | None) -> ParkedPage:
    messages = sorted(messages, key=lambda m: m.id)  # the one order every pass agrees on
    end = len(messages) if size is None else skip + size
    return ParkedPage(messages[skip:end], more=len(messages) > end)
