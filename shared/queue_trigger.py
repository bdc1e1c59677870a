"""Queue polling with the semantics of the Functions queue trigger (host.json ``queues``):
batches of ``batchSize``, a new batch fetched once no more than ``newBatchThreshold`` messages
are still running, polling that backs off to ``maxPollingInterval`` while the queue is empty,
a failed message made visible again after ``visibilityTimeout``, and moved to
``<queue>-poison`` once it has failed ``maxDequeueCount`` times, with its last error beside it
(``shared.bus.poison``: the Functions host moves the bare message; the bus's own pipeline
parks on that last try itself, so this move is for failures outside it, such as timeouts).

No message content and no handler error ends a worker: every failure is logged with its
type and traceback and the loop carries on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from shared.bus.envelope import bus_message_id
from shared.bus.poison import error_reason, park
from shared.errors import BusError, ConfigurationError, NotFound, OutcomeUnknown
from shared.host_json import QueueSettings
from shared.logsafe import REASON_CHARS, shown
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.queue import QueueMessage

log = logging.getLogger(__name__)

Handler = Callable[[str, int], Awaitable[Any]]
"""Called with a message's content and its dequeue count."""
MessageHandler = Callable[[QueueMessage], Awaitable[Any]]
"""Called with the whole received message (id, insertion time, dequeue count...), as a
Functions queue trigger binds it."""

MIN_POLLING_INTERVAL = 0.1
"""First wait after an empty receive; doubles (with jitter) up to maxPollingInterval."""


class QueueWorker:
    """Drains one queue into one handler."""

    def __init__(
        self,
        account: StorageAccount,
        queue_name: str,
        handler: Handler | None,
        settings: QueueSettings | None = None,
        *,
        message_handler: MessageHandler | None = None,
    ) -> None:
        """Give ``handler`` (content and dequeue count) or ``message_handler`` (the whole
        message), not both."""
        if handler is not None and message_handler is None:
            message_handler = _of_content(handler)
        elif handler is not None or message_handler is None:
            raise ConfigurationError("a queue worker takes a handler or a message_handler")
        self.account = account
        self.queue = account.queue(queue_name)
        self.poison = account.queue(poison_queue(queue_name))
        self.invoke: MessageHandler = message_handler
        self.settings = settings or QueueSettings()

    async def poll_once(self) -> int:
        """Receive one batch and run it concurrently; returns how many messages were taken."""
        messages = await self._receive()
        if messages:
            await asyncio.gather(*(self.run_one(m) for m in messages))
        return len(messages)

    async def _receive(self) -> list[QueueMessage]:
        return await self.queue.receive(
            self.settings.batch_size, visibility_timeout=self.settings.lease_seconds
        )

    async def run(self, stopping: asyncio.Event) -> None:
        """Poll until ``stopping`` is set, then wait for the messages still running.

        Like the Functions host, a new batch is fetched as soon as no more than
        ``new_batch_threshold`` messages are running, so up to batch_size +
        new_batch_threshold run at once."""
        running: set[asyncio.Task[bool]] = set()
        delay = MIN_POLLING_INTERVAL

        def finished(task: asyncio.Task[bool]) -> None:
            running.discard(task)
            # Only a crash escapes run_one (it catches every Exception): the message is not
            # acknowledged and comes back after its lease, as when a real worker dies.
            if not task.cancelled() and (error := task.exception()) is not None:
                log.error(
                    "queue %s: invocation ended abruptly: %r",
                    self.queue.name,
                    error,
                    exc_info=error,
                )

        while not stopping.is_set():
            if len(running) > self.settings.new_batch_threshold:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                messages = await self._receive()
            except (BusError, OSError) as e:
                # Storage unreachable or throttling: keep the host alive and try again later.
                log.warning("queue %s: receive failed: %s", self.queue.name, e)
                messages = []
            except Exception:
                # A defect (e.g. a message the adapter cannot decode) must not end the worker;
                # backing off keeps a persistent one from spinning.
                log.exception("queue %s: receive failed unexpectedly", self.queue.name)
                messages = []
            for message in messages:
                task = asyncio.create_task(self.run_one(message))
                running.add(task)
                task.add_done_callback(finished)
            if messages:
                delay = MIN_POLLING_INTERVAL
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)
            # Randomised exponential backoff, as the host does, so idle queues cost little.
            delay = min(self.settings.max_polling_interval, delay * random.uniform(1.5, 2.5))
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    async def run_one(self, message: QueueMessage) -> bool:
        """Invoke the handler; acknowledge on success, release or poison on failure."""
        lease = _Lease(self, message)
        try:
            await lease.hold(self.invoke(message))
        except Exception as e:
            return await self._failed(lease.current, e)
        message = lease.current
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
        last = message.dequeue_count >= self.settings.max_dequeue_count
        # The traceback carries the notes the function added (the bus adds endpoint, message
        # type and id); the line itself says enough to grep for.
        log.log(
            logging.ERROR if last else logging.WARNING,
            "queue %s: message %s (queue message %s) failed (try %d of %d): %s: %s",
            self.queue.name,
            shown(bus_message_id(message.content) or "-", 100),
            message.id,
            message.dequeue_count,
            self.settings.max_dequeue_count,
            type(error).__name__,
            _text(error),
            exc_info=error,
        )
        if last:
            await self._move_to_poison(message, error)
            return False
        # If the release is lost too, the message still reappears when its lease runs out.
        with contextlib.suppress(NotFound, OutcomeUnknown):
            await self.queue.update(
                message.id, message.pop_receipt, visibility_timeout=self.settings.visibility_timeout
            )
        return False

    async def _move_to_poison(self, message: QueueMessage, error: Exception) -> None:
        named = bus_message_id(message.content)
        text = f"{type(error).__name__}: {str(error) or _text(error)}"
        if notes := getattr(error, "__notes__", None):
            text += f" ({'; '.join(map(str, notes))})"
        reason = replace(
            error_reason(
                self.queue.name,
                error,
                message.dequeue_count,
                enqueued_at=message.inserted_on,
                failed_at=datetime.now(UTC),
            ),
            reason=shown(text, REASON_CHARS),
            message_id=None if named is None else shown(named, 100),
        )
        try:
            form = await park(
                self.account,
                message.content,
                reason,
                self.settings.parked_container,
                tokens=self.account.blob_container(self.settings.tokens_container),
            )
        except (BusError, OSError) as e:
            # Not moved: it comes back after its lease and is moved then.
            log.error(
                "queue %s: moving message %s (queue message %s) to %s failed: %s",
                self.queue.name,
                shown(reason.message_id or "-", 100),
                message.id,
                self.poison.name,
                e,
            )
            return
        log.error(
            "queue %s: moved message %s (queue message %s) to %s (%s)",
            self.queue.name,
            shown(reason.message_id or "-", 100),
            message.id,
            self.poison.name,
            form,
        )
        # Should the delete be lost, the message is moved once more: a duplicate in poison,
        # which a replay sends twice and the pipeline recognises.
        with contextlib.suppress(NotFound, OutcomeUnknown):
            await self.queue.delete(message.id, message.pop_receipt)


def _text(error: BaseException) -> str:
    """The error's first line: the log line stays one line (the traceback has the rest)."""
    if isinstance(error, TimeoutError) and not str(error):
        return "the function did not finish within functionTimeout"
    lines = str(error).splitlines()
    return shown(lines[0], 500) if lines else ""


def _of_content(handler: Handler) -> MessageHandler:
    async def invoke(message: QueueMessage) -> Any:
        return await handler(message.content, message.dequeue_count)

    return invoke


class _Lease:
    """Keeps a received message hidden while its function runs (when renewal is on). Each
    renewal changes the pop receipt, so the acknowledgement must use ``current``."""

    def __init__(self, worker: QueueWorker, message: QueueMessage) -> None:
        self.worker = worker
        self.current = message

    async def hold(self, work: Awaitable[Any]) -> None:
        settings = self.worker.settings
        if not settings.renew_lease:
            await work
            return
        done = asyncio.Event()
        renewing = asyncio.create_task(self._renew(done, settings.lease_seconds))
        try:
            await work
        finally:
            # Let an update in flight finish rather than cancel it: a cancelled update may
            # still change the pop receipt, and the acknowledgement would then miss.
            done.set()
            await renewing

    async def _renew(self, done: asyncio.Event, lease: float) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), lease / 2)
            if done.is_set():
                return
            message = self.current
            try:
                receipt = await self.worker.queue.update(
                    message.id, message.pop_receipt, visibility_timeout=lease
                )
            except (BusError, OSError) as e:
                log.warning(
                    "queue %s: renewing %s failed: %s", self.worker.queue.name, message.id, e
                )
                return
            self.current = QueueMessage(
                message.id,
                message.content,
                message.dequeue_count,
                receipt,
                message.inserted_on,
                message.next_visible_on,
            )
