"""Queue polling with the semantics of the Functions queue trigger (host.json ``queues``):
batches of ``batchSize``, a failed message made visible again after ``visibilityTimeout``,
and moved to ``<queue>-poison`` once it has failed ``maxDequeueCount`` times."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.errors import NotFound, OutcomeUnknown
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.queue import QueueMessage

log = logging.getLogger(__name__)

Handler = Callable[[str, int], Awaitable[Any]]


@dataclass(frozen=True)
class QueueSettings:
    batch_size: int = 16
    new_batch_threshold: int = 8
    max_dequeue_count: int = 5
    visibility_timeout: float = 0.0
    """Delay before a failed message is retried."""
    lease_seconds: float = 60.0
    """How long a received message stays hidden while its function runs."""

    @classmethod
    def from_host_json(cls, path: Path) -> QueueSettings:
        queues = json.loads(path.read_text()).get("extensions", {}).get("queues", {})
        return cls(
            batch_size=int(queues.get("batchSize", 16)),
            new_batch_threshold=int(queues.get("newBatchThreshold", 8)),
            max_dequeue_count=int(queues.get("maxDequeueCount", 5)),
            visibility_timeout=_timespan(queues.get("visibilityTimeout", "00:00:00")),
        )


def _timespan(value: str) -> float:
    """host.json time spans are 'hh:mm:ss' (optionally with fractional seconds)."""
    hours, minutes, seconds = value.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


class QueueWorker:
    """Drains one queue into one handler."""

    def __init__(
        self,
        account: StorageAccount,
        queue_name: str,
        handler: Handler,
        settings: QueueSettings | None = None,
    ) -> None:
        self.queue = account.queue(queue_name)
        self.poison = account.queue(poison_queue(queue_name))
        self.handler = handler
        self.settings = settings or QueueSettings()

    async def poll_once(self) -> int:
        """Receive one batch and run it concurrently; returns how many messages were taken."""
        messages = await self.queue.receive(
            min(self.settings.batch_size, 32), visibility_timeout=self.settings.lease_seconds
        )
        if messages:
            await asyncio.gather(*(self.run_one(m) for m in messages))
        return len(messages)

    async def run_one(self, message: QueueMessage) -> bool:
        """Invoke the handler; acknowledge on success, release or poison on failure."""
        try:
            await self.handler(message.content, message.dequeue_count)
        except Exception as e:
            return await self._failed(message, e)
        try:
            await self.queue.delete(message.id, message.pop_receipt)
        except NotFound:
            pass  # our lease expired and someone else holds it now; they will finish it
        except OutcomeUnknown as e:
            # If the acknowledgement was lost the message comes back and is recognised as a
            # duplicate; nothing to do here but say so.
            log.warning("queue %s: acknowledging %s failed: %s", self.queue.name, message.id, e)
        return True

    async def _failed(self, message: QueueMessage, error: Exception) -> bool:
        if message.dequeue_count >= self.settings.max_dequeue_count:
            log.error(
                "queue %s: message %s failed %d times, moving it to %s: %s",
                self.queue.name,
                message.id,
                message.dequeue_count,
                self.poison.name,
                error,
            )
            await self.poison.send(message.content)
            with contextlib.suppress(NotFound):
                await self.queue.delete(message.id, message.pop_receipt)
            return False
        log.warning(
            "queue %s: message %s failed (try %d): %s",
            self.queue.name,
            message.id,
            message.dequeue_count,
            error,
        )
        with contextlib.suppress(NotFound):
            await self.queue.update(
                message.id, message.pop_receipt, visibility_timeout=self.settings.visibility_timeout
            )
        return False
