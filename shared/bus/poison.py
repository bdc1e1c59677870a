"""Poison-queue handling: reading why a message was parked, and replaying it.

A poison message is either the raw signal (moved there by the Functions host after
``maxDequeueCount`` failures) or a JSON wrapper ``{"poison": {...reason...}, "signal": raw}``
written by the pipeline when it refused a message outright. Replaying sends the original
signal back to the endpoint's queue; its token was kept, so it is processed exactly once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.queue import MessageQueue, QueueMessage


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


async def replay(
    account: StorageAccount,
    endpoint: str,
    limit: int = 1000,
    *,
    select: Callable[[str], bool] | None = None,
    dry_run: bool = False,
    on_moved: Callable[[], None] | None = None,
) -> int:
    """Move up to ``limit`` poison messages of ``endpoint`` back to its queue; returns how
    many were moved. Each is re-sent before it is deleted, so a crash can only duplicate a
    signal, which the pipeline ignores.

    ``select`` (given a poison message's content) chooses which to move; ``dry_run`` moves
    none and returns how many would be moved. Messages passed over become visible again at
    the end of the pass (or when their 60 s hold runs out)."""
    poison = account.queue(poison_queue(endpoint))
    queue = account.queue(endpoint)
    moved = 0
    passed = _PassedOver(select, dry_run)
    while moved + passed.chosen < limit:
        wanted = min(32, limit - moved - passed.chosen)
        batch = passed.unseen(await poison.receive(wanted, visibility_timeout=60))
        if not batch:
            break
        for message in batch:
            if passed.over(message):
                continue
            await queue.send(unwrap(message.content).signal)
            with contextlib.suppress(NotFound):
                await poison.delete(message.id, message.pop_receipt)
            moved += 1
            if on_moved is not None:
                on_moved()
    await passed.release(poison)
    return moved + passed.chosen


class _PassedOver:
    """Replay's filter and dry run: the poison messages a pass receives but does not move,
    remembered so that the pass does not take them twice, and released at its end."""

    def __init__(self, select: Callable[[str], bool] | None, dry_run: bool) -> None:
        self.select = select
        self.dry_run = dry_run
        self.chosen = 0
        """Messages a dry run would have moved."""
        self.held: dict[str, QueueMessage] = {}
        self.seen: set[str] = set()

    def unseen(self, batch: list[QueueMessage]) -> list[QueueMessage]:
        for message in batch:
            if message.id in self.held:
                self.held[message.id] = message  # received again: its new pop receipt
        fresh = [m for m in batch if m.id not in self.seen]
        self.seen.update(m.id for m in batch)
        return fresh

    def over(self, message: QueueMessage) -> bool:
        """Whether to pass over ``message`` (and hold it until the pass ends)."""
        chosen = self.select is None or self.select(message.content)
        if chosen and not self.dry_run:
            return False
        self.chosen += chosen
        self.held[message.id] = message
        return True

    async def release(self, poison: MessageQueue) -> None:
        for message in self.held.values():
            with contextlib.suppress(NotFound):
                await poison.update(message.id, message.pop_receipt, visibility_timeout=0)
