"""What the rolling-deploy test drives: local hosts (``python -m lab.host``) of either version
of its app on one Azurite, the clients of either version (over a host's HTTP ingress, or the
same ingress client in this process), the operator's commands as separate processes, and
reads of the endpoints' state, the queues and the hosts' logs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.bus.ingress import IngressClient
from shared.errors import NotFound
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.settings import resolve_settings
from shared.stores.azure import AzureStorageAccount

V1 = "tests.rolling.app_v1:app"
V2 = "tests.rolling.app_v2:app"
ENDPOINTS = ("orders", "stock", "shipping", "ledger")
FUNCTION_KEY = "rolling-deploy-key"
GIVE_BACK_SECONDS = 300
"""Longer than the test: a message version 1 cannot read is given back (its first delay is
seconds), never parked, while version 2 instances come up."""
QUICK_POLL = "00:00:00.5"
"""The hosts' maxPollingInterval (the repository's host.json says 2 s): an idle host takes up
what is sent to it, or given back, within half a second."""
WAIT = 90.0
"""The longest any one thing the test waits for may take on a busy machine."""

T = TypeVar("T")


def host_environ(azurite: AzuriteEndpoints, app: str) -> dict[str, str]:
    """The environment of a host, or a tool, of ``app``: this process's without its bus
    settings, the emulator's connection, a known function key, no cleanup run."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "OTEL_"))}
    return {
        **kept,
        "AzureWebJobsStorage": azurite.connection_string,
        APP_SETTING: app,
        "BUS_HOST_FUNCTION_KEY": FUNCTION_KEY,
        "BUS_GIVE_BACK_SECONDS": str(GIVE_BACK_SECONDS),
        "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
    }


@dataclass
class Fleet:
    """The hosts of one deploy, on one emulator, and the account the test reads through."""

    azurite: AzuriteEndpoints
    folder: Path
    account: AzureStorageAccount
    hosts: dict[str, HostProcess] = field(default_factory=dict)

    def worker(self, app: str) -> Worker:
        settings = resolve_settings(environ=host_environ(self.azurite, app), local_file=None)
        return Worker.for_account(self.account, settings)

    async def provision(self) -> None:
        """Queues, tables and containers, and the subscriptions (the same in both versions)."""
        worker = self.worker(V1)
        await provision(self.account, worker.resources)
        await worker.bus().subscribe_all()

    def client(self, app: str) -> IngressClient:
        """A sender of ``app``'s version in this process: the ingress client the HTTP
        ingress and ``bus send`` use, under the sender name ``cli``."""
        return self.worker(app).bus().client("cli")

    async def start(self, name: str, app: str) -> HostProcess:
        """A host of ``app``, serving every function, ready; its log is ``NAME.log``; the
        repository's host.json but for ``QUICK_POLL``."""
        host = HostProcess(
            REPO_ROOT / "function_app.py",
            host_environ(self.azurite, app),
            self.log(name),
            args=["--host-json", str(self.host_json())],
        )
        self.hosts[name] = host
        await asyncio.to_thread(host.start)
        return host

    def host_json(self) -> Path:
        host = json.loads((REPO_ROOT / "host.json").read_text())
        host["extensions"]["queues"]["maxPollingInterval"] = QUICK_POLL
        path = self.folder / "host.json"
        path.write_text(json.dumps(host))
        return path

    async def stop(self, name: str) -> int:
        """SIGTERM, as a deploy stops an instance; the host's exit code."""
        return await asyncio.to_thread(self.hosts[name].stop)

    def kill_all(self) -> None:
        for host in self.hosts.values():
            host.kill()

    def log(self, name: str) -> Path:
        return self.folder / f"{name}.log"

    def lines(self, name: str, mark: str) -> list[str]:
        """The lines of host ``name``'s log that hold ``mark``."""
        return [line for line in self.log(name).read_text().splitlines() if mark in line]

    async def post(
        self, host: HostProcess, request: Mapping[str, object], key: str
    ) -> tuple[int, dict[str, Any]]:
        """POST ``request`` to the host's ingress under ``key``: status and answer."""
        headers = {"x-functions-key": FUNCTION_KEY, "Idempotency-Key": key}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{host.url}/api/messages", headers=headers, json=request) as response,
        ):
            answer: dict[str, Any] = json.loads(await response.text())
            return response.status, answer

    async def state(self, endpoint: str, order: str) -> dict[str, Any] | None:
        """An endpoint's state for one order (None before its first message)."""
        try:
            entity = await self.account.table(endpoint).get(order, "state")
        except NotFound:
            return None
        found: dict[str, Any] = json.loads(str(entity["data"]))
        return found

    async def parked(self, endpoint: str) -> list[dict[str, Any]]:
        """The poison wrappers waiting in the endpoint's poison queue (up to 32)."""
        messages = await self.account.queue(poison_queue(endpoint)).peek()
        return [json.loads(m.content) for m in messages]

    async def depth(self, queue: str) -> int:
        """Messages in a queue, hidden ones (given back, delayed, leased) included."""
        return await self.account.queue(queue).approximate_count()

    def run(self, module: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m MODULE ARGS`` as an operator runs it, with version 2's settings."""
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            cwd=self.folder,
            env={**host_environ(self.azurite, V2), "PYTHONPATH": str(REPO_ROOT)},
            timeout=300,
        )


async def until(what: str, probe: Callable[[], Awaitable[T | None]]) -> T:
    """``probe``'s first true answer (not None, False or empty), within ``WAIT`` seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        answer = await probe()
        if answer:
            return answer
        await asyncio.sleep(0.2)
    raise TimeoutError(f"not within {WAIT:.0f} s: {what}")
