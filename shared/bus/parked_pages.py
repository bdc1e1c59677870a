"""Every parked message of a poison queue, page by page, looked at and not taken.

A page is cut from one pass over the queue (``shared.bus.parked_pass``) that keeps only each
message's listed entry (``parked_entry``), never its content, and reads at most ``limit``
messages (``BUS_CONSOLE_LIST_LIMIT``). A queue hands its messages out in no order that survives
a pass (the ones a pass made visible again come after the rest), so every pass reads the whole
queue, as far as it goes, and pages are cut from it sorted by queue message id, an order every
pass agrees on: a page after ``skip`` is the same one on every pass while the queue is not
changed and the pass is complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.bus.parked_groups import parked_entry
from shared.bus.parked_pass import look_through
from shared.stores.queue import MessageQueue


@dataclass(frozen=True)
class ParkedPage:
    entries: list[dict[str, Any]]
    """The page's messages as listed (``parked_entry``)."""
    more: bool
    """Messages wait beyond this page."""
    complete: bool
    """The pass looked at every message of the queue (not stopped by its limit or its time):
    when false, the page is cut from those it looked at."""


async def parked_page(
    queue: MessageQueue, endpoint: str, *, limit: int, skip: int = 0, size: int | None = None
) -> ParkedPage:
    """The parked messages of ``endpoint`` after the first ``skip``, at most ``size`` of them
    (all with None), cut from a pass that looks at ``limit`` messages at most."""
    if skip < 0 or (size is not None and size < 1) or limit < 1:
        raise ValueError("a page skips zero or more messages and holds at least one")
    looked = await look_through(queue, lambda m: parked_entry(endpoint, m), limit=limit)
    entries = sorted(looked.kept, key=lambda e: str(e["queue_message_id"]))
    end = len(entries) if size is None else skip + size
    return ParkedPage(entries[skip:end], more=len(entries) > end, complete=looked.complete)
