"""The local Functions host: queue triggers, timer triggers and HTTP triggers of one app, in
one process, until asked to stop.

Stopping is graceful: the HTTP listener closes, queues stop being polled, running
invocations get ``drain_seconds`` to finish (a message whose invocation is cut short is not
acknowledged and comes back after its lease), then connections are closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web
from azure.functions.queue import QueueMessage

from shared.host.functions import LoadedApp, QueueFunction, invoke
from shared.host.http import ROUTE_PREFIX, HttpFrontEnd, Keys
from shared.host.queue_worker import Handler, QueueSettings, QueueWorker, timespan
from shared.host.timers import run_timer
from shared.settings import load_storage_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

log = logging.getLogger(__name__)

DEFAULT_FUNCTION_TIMEOUT = 300.0


@dataclass(frozen=True)
class HostConfig:
    queues: QueueSettings
    function_timeout: float = DEFAULT_FUNCTION_TIMEOUT
    drain_seconds: float = 30.0

    @classmethod
    def from_host_json(cls, path: Path, lease_seconds: float | None = None) -> HostConfig:
        queues = replace(QueueSettings.from_host_json(path), renew_lease=True)
        if lease_seconds is not None:
            queues = replace(queues, lease_seconds=lease_seconds)
        timeout = json.loads(path.read_text()).get("functionTimeout")
        return cls(queues, timespan(timeout) if timeout else DEFAULT_FUNCTION_TIMEOUT)


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

    def _handler(self, queue: QueueFunction) -> Handler:
        async def handle(content: str, dequeue_count: int) -> None:
            # The queue adapter has already decoded the base64 wire form, as the host does.
            message = QueueMessage(body=content.encode(), dequeue_count=dequeue_count)  # type: ignore[no-untyped-call]
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
        runner: web.AppRunner | None = None
        if self.app.http:
            front = HttpFrontEnd(self.app.http, self.keys, self.config.function_timeout)
            runner = web.AppRunner(front.app, shutdown_timeout=self.config.drain_seconds)
            await runner.setup()
            site = web.TCPSite(runner, bind, port)
            await site.start()
            self.port = int(runner.addresses[0][1])
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(
                QueueWorker(
                    self.account(q.connection), q.queue_name, self._handler(q), self.config.queues
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
        if ready is not None:
            ready(self)
        await stopping.wait()
        log.info(
            "host: stopping; waiting up to %.0fs for running functions", self.config.drain_seconds
        )
        if runner is not None:
            await runner.cleanup()
        done, pending = await asyncio.wait(tasks, timeout=self.config.drain_seconds)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                log.error("host: %s ended with %r", task.get_name(), task.exception())
        await self.close()

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
