"""The local Functions host: queue triggers, timer triggers and HTTP triggers of one app, in
one process, until asked to stop.

Stopping is graceful: the HTTP listener closes, queues stop being polled, running
invocations get ``drain_seconds`` to finish (a message whose invocation is cut short is not
acknowledged and comes back after its lease), then connections are closed.

A queue or timer worker that ends while the host is not stopping (a bug: the workers catch
what storage and functions raise) is logged at once and reported to ``shared.health``, so the
app's health endpoint says which worker stopped and why.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web
from azure.functions.queue import QueueMessage

from lab.host.functions import LoadedApp, QueueFunction, invoke
from lab.host.http import MAX_CONNECTIONS, MAX_REQUEST_BYTES, ROUTE_PREFIX, HttpFrontEnd, Keys
from lab.host.timers import run_timer
from shared import health
from shared.errors import ConfigurationError
from shared.host_json import DEFAULT_FUNCTION_TIMEOUT, QueueSettings, function_timeout
from shared.queue_trigger import MessageHandler, QueueWorker
from shared.settings import load_storage_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.queue import QueueMessage as ReceivedMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostConfig:
    queues: QueueSettings
    function_timeout: float = DEFAULT_FUNCTION_TIMEOUT
    drain_seconds: float = 30.0
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_connections: int = MAX_CONNECTIONS
    """HTTP connections open at once; one more is answered 503 and closed."""

    def __post_init__(self) -> None:
        if self.max_request_bytes < 1:
            raise ConfigurationError("the request size limit must be at least 1 byte")
        if self.max_connections < 1:
            raise ConfigurationError("the connection cap must be at least 1")

    @classmethod
    def from_host_json(cls, path: Path, lease_seconds: float | None = None) -> HostConfig:
        queues = replace(QueueSettings.from_host_json(path), renew_lease=True)
        if lease_seconds is not None:
            queues = replace(queues, lease_seconds=lease_seconds)
        return cls(queues, function_timeout(path))


class LocalHost:
    def __init__(
        self, app: LoadedApp, config: HostConfig, environ: Mapping[str, str], keys: Keys
    ) -> None:
        self.app = app
        self.config = config
        self.environ = environ
        self.keys = keys
        self.accounts: dict[str, StorageAccount] = {}
        self.port: int | None = None

    def account(self, connection: str) -> StorageAccount:
        """One storage client per connection setting, as the host keeps one per connection."""
        if connection not in self.accounts:
            settings = load_storage_settings(self.environ, connection)
            self.accounts[connection] = AzureStorageAccount(settings)
        return self.accounts[connection]

    def _handler(self, queue: QueueFunction) -> MessageHandler:
        async def handle(received: ReceivedMessage) -> None:
            # The queue adapter has already decoded the base64 wire form, as the host does;
            # the function gets what the Functions host binds (the bus keeps the insertion
            # time in a poison reason).
            message = QueueMessage(  # type: ignore[no-untyped-call]
                id=received.id,
                body=received.content.encode(),
                dequeue_count=received.dequeue_count,
                insertion_time=received.inserted_on,
                time_next_visible=received.next_visible_on,
            )
            await invoke(queue.function, queue.arg_name, message, self.config.function_timeout)

        return handle

    async def run(
        self,
        stopping: asyncio.Event,
        bind: str = "127.0.0.1",
        port: int = 7071,
        ready: Callable[[LocalHost], None] | None = None,
    ) -> None:
        """Serve until ``stopping`` is set, then shut down gracefully."""
        try:
            runner = await self._listen(bind, port)
            tasks = self._start_workers(stopping)
            if ready is not None:
                ready(self)
            await stopping.wait()
            log.info(
                "host: stopping; waiting up to %.0fs for running functions",
                self.config.drain_seconds,
            )
            if runner is not None:
                await runner.cleanup()
            await self._drain(tasks)
        finally:
            health.forget_workers()  # what this run recorded ends with it
            await self.close()

    async def _listen(self, bind: str, port: int) -> web.BaseRunner | None:
        """The HTTP listener, when the app has HTTP functions (``self.port`` is then set)."""
        if not self.app.http:
            return None
        front = HttpFrontEnd(
            self.app.http,
            self.keys,
            self.config.function_timeout,
            max_request_bytes=self.config.max_request_bytes,
            max_connections=self.config.max_connections,
        )
        runner = front.runner(shutdown_timeout=self.config.drain_seconds)
        await runner.setup()
        site = web.TCPSite(runner, bind, port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        return runner

    def _start_workers(self, stopping: asyncio.Event) -> list[asyncio.Task[Any]]:
        health.forget_workers()
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(
                QueueWorker(
                    self.account(q.connection),
                    q.queue_name,
                    None,
                    self.config.queues,
                    message_handler=self._handler(q),
                ).run(stopping),
                name=f"queue {q.name}",
            )
            for q in self.app.queues
        ]
        tasks += [
            asyncio.create_task(
                run_timer(t, stopping, self.config.function_timeout), name=f"timer {t.name}"
            )
            for t in self.app.timers
        ]
        for task in tasks:
            task.add_done_callback(lambda task: _worker_ended(task, stopping))
        return tasks

    async def _drain(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Give running workers ``drain_seconds`` to finish, then cancel the rest."""
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.config.drain_seconds)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        for account in self.accounts.values():
            await account.close()
        self.accounts.clear()
        # The app's own clients (shared.runtime) live in the same process; closing them
        # here avoids unclosed-connection warnings at exit. Other apps simply lack it.
        runtime = sys.modules.get("shared.runtime")
        close = getattr(runtime, "close", None)
        if close is not None:
            await close()

    def describe(self) -> list[str]:
        """One line per function, like the Functions host prints at start-up."""
        lines = []
        for q in self.app.queues:
            lines.append(f"  {q.name}: queueTrigger on {q.queue_name}")
        for t in self.app.timers:
            lines.append(f"  {t.name}: timerTrigger '{t.schedule.expression}'")
        for h in self.app.http:
            methods = ",".join(sorted(h.methods))
            url = f"http://127.0.0.1:{self.port}/{ROUTE_PREFIX}/{h.route}"
            lines.append(f"  {h.name}: [{methods}] {url} (auth: {h.auth_level})")
        return lines


def _worker_ended(task: asyncio.Task[Any], stopping: asyncio.Event) -> None:
    """A worker ends on its own only when the host stops; any other end is a failure that
    the log and the health endpoint must show while the host keeps serving the rest."""
    if task.cancelled():
        if stopping.is_set():
            return  # cut short at the drain deadline, as a graceful stop does
        reason = "cancelled"
    elif (error := task.exception()) is not None:
        reason = f"ended with {error!r}"
    elif stopping.is_set():
        return
    else:
        reason = "returned while the host was running"
    log.error("host: %s %s", task.get_name(), reason)
    health.worker_stopped(task.get_name(), reason)
