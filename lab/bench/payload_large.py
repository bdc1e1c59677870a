"""``python -m lab.bench.payload_large``: what one large command costs the local host.

It starts Azurite and the local host (``python -m lab.host`` serving ``function_app.py``)
with the large-body app (``lab.bench.large_app``), sends one small document first (what the
first request loads is not the body's cost), reads the host's idle resident memory, posts
one command whose body is ``--mib`` MiB to the HTTP ingress, waits until its handler has
processed it, and prints the time taken and the host's peak resident memory (``VmHWM`` from
/proc) above idle, as a ratio to the body's size. The issue's target is at most 4 times the
body. Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, Azurite, AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.errors import NotFound
from shared.provisioning import provision
from shared.runtime import Worker
from shared.settings import StorageSettings, resolve_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

LARGE_APP = "lab.bench.large_app:app"
FUNCTION_KEY = "bench-key"
MIB = 1024 * 1024
SETTLE_SECONDS = 2.0
"""How long the host is left alone after start-up before its idle memory is read."""


def host_environ(azurite: AzuriteEndpoints, **more: str) -> dict[str, str]:
    """The environment of a local host running the large-body app on ``azurite``: this
    process's, without its bus settings, and no cleanup run during a measurement."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "OTEL_"))}
    return {
        **kept,
        "AzureWebJobsStorage": azurite.connection_string,
        APP_SETTING: LARGE_APP,
        "BUS_HOST_FUNCTION_KEY": FUNCTION_KEY,
        "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
        **more,
    }


async def provisioned(account: StorageAccount, environ: Mapping[str, str]) -> Worker:
    """The large-body app's queues, tables and containers created on ``account``."""
    worker = Worker.for_account(account, resolve_settings(environ=environ, local_file=None))
    await provision(account, worker.resources)
    return worker


def document(doc_id: str, chars: int, copies: int = 0) -> dict[str, object]:
    """The ingress request of a StoreDocument whose content is ``chars`` characters."""
    body = {"doc_id": doc_id, "content": "d" * chars, "copies": copies}
    return {"type": "StoreDocument", "body": body}


async def post(url: str, request: Mapping[str, object], key: str) -> tuple[int, str]:
    """POST ``request`` to the host's ingress under ``key``: its status and answer."""
    headers = {"x-functions-key": FUNCTION_KEY, "Idempotency-Key": key}
    data = json.dumps(request).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/api/messages", headers=headers, data=data) as response,
    ):
        return response.status, await response.text()


async def stored(account: StorageAccount, endpoint: str, doc_id: str) -> dict[str, int] | None:
    """An endpoint's ``Stored`` state for one document (None before its first message)."""
    try:
        entity = await account.table(endpoint).get(doc_id, "state")
    except NotFound:
        return None
    state: dict[str, int] = json.loads(str(entity["data"]))
    return state


async def until_stored(
    account: StorageAccount, endpoint: str, doc_id: str, seconds: float
) -> dict[str, int] | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = await stored(account, endpoint, doc_id)
        if state is not None:
            return state
        await asyncio.sleep(0.05)
    return None


async def warm_up(url: str, account: StorageAccount) -> None:
    """One small document through the same path first: what the host loads and builds on
    its first request and first message (modules, clients, schemas) is not the body's cost."""
    status, answer = await post(url, document("warm-up", 10), "warm-up")
    if status != 202 or await until_stored(account, "documents", "warm-up", 60) is None:
        raise SystemExit(f"the warm-up message was not processed: {status} {answer[:500]}")


def memory_kib(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


@dataclass(frozen=True)
class Measurement:
    body_bytes: int
    idle_kib: int
    peak_kib: int
    seconds: float

    def report(self) -> str:
        above = (self.peak_kib - self.idle_kib) * 1024
        return (
            f"body={self.body_bytes / MIB:.1f} MiB processed in {self.seconds:.2f} s; "
            f"host idle RSS={self.idle_kib / 1024:.0f} MiB, peak={self.peak_kib / 1024:.0f} MiB, "
            f"peak above idle={above / MIB:.0f} MiB = {above / self.body_bytes:.2f}x the body "
            "(target: at most 4x)"
        )


async def measure(mib: float, folder: Path) -> Measurement:
    chars = int(mib * MIB) - 100  # room for the other fields: the serialised body is ``mib``
    with Azurite(str(folder / "azurite")) as azurite:
        environ = host_environ(azurite)
        async with AzureStorageAccount(StorageSettings(azurite.connection_string)) as account:
            await provisioned(account, environ)
            host = HostProcess(REPO_ROOT / "function_app.py", environ, folder / "host.log")
            await asyncio.to_thread(host.start)
            pid = host.pid()
            try:
                await warm_up(host.url, account)
                await asyncio.sleep(SETTLE_SECONDS)
                idle = memory_kib(pid)["VmRSS"]
                started = time.perf_counter()
                status, answer = await post(host.url, document("doc-1", chars), "large-1")
                if status != 202:
                    raise SystemExit(f"the ingress answered {status}: {answer[:500]}")
                state = await until_stored(account, "documents", "doc-1", 120)
                seconds = time.perf_counter() - started
                if state != {"documents": 1, "chars": chars}:
                    raise SystemExit(f"the document was not processed once: {state}")
                peak = memory_kib(pid)["VmHWM"]
            finally:
                host.stop()
    return Measurement(int(mib * MIB), idle, peak, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.payload_large", description=__doc__)
    parser.add_argument("--mib", type=float, default=16.0, help="body size (default 16 MiB)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="payload-large-") as folder:
        result = asyncio.run(measure(args.mib, Path(folder)))
    print(result.report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
