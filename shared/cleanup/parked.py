"""The cleanup's care of parked messages: nothing parked expires, and no parked original
outlives the poison message that refers to it (beyond a grace period).

Per endpoint, one task (``poison.<endpoint>``) makes one pass over its poison queue and then
over its parked originals (``<endpoint>/`` in the ``parked`` container). The container is
shared by the apps of a system, and each app's cleanup runs these tasks for its own endpoints
only: another app's poison queues and parked originals are never read, let alone removed.

- **Entries that will expire.** The bus parks with no expiry (``shared.bus.poison.park``),
  but the Functions host moves a message to ``<queue>-poison`` with the queue's default
  time-to-live of seven days, after which the message, and with it the only signal of its
  token, would be gone. Every entry with less than ``poison_expiry_margin_seconds`` left is
  re-parked: a copy is sent with no expiry, then the entry is deleted by its pop receipt. A
  crash between the two leaves both; a replay sends the signal twice and the pipeline
  processes the message once (the second copy finds its token gone).
- **Orphan originals.** A parked original that no poison message refers to (its entry was
  replayed or discarded and the deletion of the blob was lost) is deleted once older than the
  grace period; a blob is uploaded just before its entry is sent, so a young one may be a
  park in progress.

The queue is read by receiving it, 32 at a time, each entry hidden for ``HOLD_SECONDS`` (a peek
sees only the first 32), and the entries are made visible again at the end of the pass. The
references are complete only if this pass held every entry of the queue: when the queue holds
more than the pass does (another reader, such as a replay or the audit, holds some hidden, or
the pass was too slow to keep its own), or the pass was resumed by a run that did not read the
queue, no blob is deleted in that pass (``kept["unchecked_originals"]``).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta

from shared.bus.poison import read_poison, repark
from shared.cleanup.base import CleanupContext, CleanupTask
from shared.cleanup.batching import STORAGE_ERRORS, delete_blobs
from shared.cleanup.report import TaskReport
from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.blob import BlobProperties
from shared.stores.queue import MAX_RECEIVE_BATCH, MessageQueue, QueueMessage

log = logging.getLogger(__name__)

HOLD_SECONDS = 120.0
"""How long an entry stays hidden while a pass reads the queue, should the pass die before it
shows the entries again."""
QUEUE = "queue"
BLOBS = "blobs:"


class PoisonQueue(CleanupTask):
    """One endpoint's poison queue and parked originals (see the module)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"poison.{endpoint}"
        self._held: dict[str, QueueMessage] = {}
        self._referenced: set[str] = set()
        self._complete: bool | None = None
        """Whether this pass held every entry: None until its queue pass ends."""

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        if continuation is not None and continuation.startswith(BLOBS):
            if self._complete is None:  # resumed by a run that did not read the queue
                continuation = None
            else:
                return await self._blobs_page(context, continuation[len(BLOBS) :], report)
        if continuation is None:
            self._held, self._referenced, self._complete = {}, set(), None
        return await self._queue_page(context, report)

    async def _queue_page(self, context: CleanupContext, report: TaskReport) -> str:
        poison = context.account.queue(poison_queue(self.endpoint))
        try:
            batch = await poison.receive(MAX_RECEIVE_BATCH, visibility_timeout=HOLD_SECONDS)
        except NotFound:
            self._complete = True  # no poison queue: nothing parked refers to anything
            return BLOBS
        fresh = [m for m in batch if m.id not in self._held]
        if batch and not fresh:
            self._complete = False  # our holds ran out: entries were seen twice
        for message in fresh:
            self._held[message.id] = message
            await self._keep(context, poison, message, report)
        if fresh:
            return QUEUE
        try:
            queued = await poison.approximate_count()
        except STORAGE_ERRORS:
            queued = None
        if self._complete is None:
            self._complete = queued is not None and queued <= len(self._held)
        await self._release(poison)
        return BLOBS

    async def _keep(
        self,
        context: CleanupContext,
        poison: MessageQueue,
        message: QueueMessage,
        report: TaskReport,
    ) -> None:
        record = read_poison(message.content)
        if record.original is not None:
            self._referenced.add(record.original)
        if record.newer:
            # Which original it refers to is for an upgraded version to read: none is removed.
            self._complete = False
        margin = timedelta(seconds=context.settings.poison_expiry_margin_seconds)
        if message.expires_on is None or message.expires_on - context.now > margin:
            report.kept["parked"] += 1
            return
        wire = context.config.wire_format  # an excerpt's wrapper, if it comes to that
        try:
            form = await repark(context.account, self.endpoint, message.content, version=wire)
        except STORAGE_ERRORS as e:
            log.warning("cleanup %s: entry %s not re-parked: %s", self.id, message.id, e)
            report.kept["storage_error"] += 1
            return
        try:
            await poison.delete(message.id, message.pop_receipt)
        except NotFound:
            # Received by someone else since (a replay): the copy is harmless beside it.
            report.changed["poison_entries_copied"] += 1
        else:
            report.changed["poison_entries_reparked" if form == "copy" else "poison_excerpted"] += 1
        del self._held[message.id]
        log.info("cleanup %s: entry %s will expire; re-parked with no expiry", self.id, message.id)

    async def _release(self, poison: MessageQueue) -> None:
        for message in self._held.values():
            with contextlib.suppress(*STORAGE_ERRORS):
                await poison.update(message.id, message.pop_receipt, visibility_timeout=0)
        self._held = {}

    async def _blobs_page(
        self, context: CleanupContext, continuation: str, report: TaskReport
    ) -> str | None:
        parked = context.account.blob_container(context.config.parked_container)
        try:
            page = await parked.list_page(
                f"{self.endpoint}/",
                page_size=context.settings.page_size,
                continuation=continuation or None,
            )
        except NotFound:
            return None  # no parked container: nothing to remove
        doomed: list[BlobProperties] = []
        for blob in page.items:
            if blob.name in self._referenced:
                report.kept["parked_originals"] += 1
            elif not context.is_old(blob.last_modified):
                report.kept["young"] += 1
            elif not self._complete:
                report.kept["unchecked_originals"] += 1
            else:
                doomed.append(blob)
        removed = await delete_blobs(parked, doomed)
        if removed:
            report.removed["orphan_parked_originals"] += removed
        return None if page.continuation is None else BLOBS + page.continuation


def poison_tasks(endpoints: list[str]) -> list[CleanupTask]:
    """The tasks that keep the endpoints' parked messages (``standard_tasks`` adds them)."""
    return [PoisonQueue(e) for e in endpoints]
