"""Poison-queue handling: reading why a message was parked, and replaying it.

A poison message is either the raw signal (moved there by the Functions host after
``maxDequeueCount`` failures) or a JSON wrapper ``{"poison": {...reason...}, "signal": raw}``
written by the pipeline when it refused a message outright. Replaying sends the original
signal back to the endpoint's queue; its token was kept, so it is processed exactly once.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount


@dataclass(frozen=True)
class PoisonedMessage:
    signal: str
    reason: str


def unwrap(content: str) -> PoisonedMessage:
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict) and set(data) == {"poison", "signal"}:
        info = data["poison"] if isinstance(data["poison"], dict) else {}
        return PoisonedMessage(str(data["signal"]), str(info.get("reason", "")))
    return PoisonedMessage(content, "failed maxDequeueCount times (moved by the host)")


async def replay(account: StorageAccount, endpoint: str, limit: int = 1000) -> int:
    """Move up to ``limit`` poison messages of ``endpoint`` back to its queue; returns how
    many were moved. Each is re-sent before it is deleted, so a crash can only duplicate a
    signal, which the pipeline ignores."""
    poison = account.queue(poison_queue(endpoint))
    queue = account.queue(endpoint)
    moved = 0
    while moved < limit:
        batch = await poison.receive(min(32, limit - moved), visibility_timeout=60)
        if not batch:
            break
        for message in batch:
            await queue.send(unwrap(message.content).signal)
            with contextlib.suppress(NotFound):
                await poison.delete(message.id, message.pop_receipt)
            moved += 1
    return moved
