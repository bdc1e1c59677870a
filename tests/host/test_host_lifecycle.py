"""The local host's lifecycle: a graceful stop exits 0 whatever mix of triggers it serves,
says ``port=`` only when it listens, and a trigger worker that ends while the host runs is
what the health endpoint reports."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from lab.host.functions import load_functions
from lab.host.host import HostConfig, LocalHost
from lab.host.http import Keys
from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import runtime
from shared.host_json import QueueSettings
from shared.provisioning import provision
from shared.sample.app import PlaceOrder
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import (
    Fault,
    Instrumentation,
    InstrumentedAccount,
    Operation,
)
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

KEY = "lifecycle-fn-key"
NEVER = "0 0 0 1 1 *"
"""A cleanup schedule that does not fire during a test."""


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    """Private: the sample app's resource names are fixed and its queues are read here."""
    for endpoints in started_azurite():  # one emulator, stopped when the loop ends
        asyncio.run(provisioned(endpoints))
        yield endpoints


async def provisioned(endpoints: AzuriteEndpoints) -> None:
    async with AzureStorageAccount(StorageSettings(endpoints.connection_string)) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        await worker.bus().subscribe_all()


def environment(endpoints: AzuriteEndpoints) -> dict[str, str]:
    return {
        **os.environ,
        "AzureWebJobsStorage": endpoints.connection_string,
        "CLEANUP_SCHEDULE": NEVER,
        "BUS_HOST_FUNCTION_KEY": KEY,
    }


def order(order_id: str) -> dict[str, object]:
    return {
        "type": "PlaceOrder",
        "to": "orders",
        "body": {"order_id": order_id, "customer": "ada", "amount_cents": 1250},
    }


async def queue_drained(endpoints: AzuriteEndpoints, queue: str, seconds: float) -> bool:
    async with AzureStorageAccount(StorageSettings(endpoints.connection_string)) as account:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if await account.queue(queue).approximate_count() == 0:
                return True
            await asyncio.sleep(0.2)
    return False


async def send_order(endpoints: AzuriteEndpoints, order_id: str) -> None:
    async with AzureStorageAccount(StorageSettings(endpoints.connection_string)) as account:
        client = runtime.Worker.for_account(account).bus().client("test")
        command = PlaceOrder(order_id=order_id, customer="ada", amount_cents=100)
        await client.send(command, to="orders", idempotency_key=order_id)


@pytest.mark.parametrize(
    "functions",
    [
        ["ingress"],
        ["ingress", "health"],
        ["orders"],
        ["cleanup"],
        ["orders", "cleanup"],
        ["ingress", "orders", "cleanup"],
        None,
    ],
    ids=lambda f: "+".join(f) if f else "all",
)
async def test_a_graceful_stop_exits_0_whatever_the_host_serves(
    own_azurite: AzuriteEndpoints, tmp_path: Path, functions: list[str] | None
) -> None:
    serves_http = functions is None or "ingress" in functions
    host = HostProcess(
        REPO_ROOT / "function_app.py",
        environment(own_azurite),
        tmp_path / "host.log",
        args=["--functions", *functions] if functions else [],
    )
    await asyncio.to_thread(host.start)
    order_id = f"stop-{'-'.join(functions or ['all'])}"
    if serves_http:
        # A request builds the app's storage clients: the stop must close them.
        async with aiohttp.ClientSession() as session:
            response = await session.post(
                f"{host.url}/api/messages?code={KEY}",
                json=order(order_id),
                headers={"Idempotency-Key": order_id},
            )
            assert response.status == 202, await response.text()
    if functions is None or "orders" in functions:
        if not serves_http:
            await send_order(own_azurite, order_id)
        assert await queue_drained(own_azurite, "orders", 30)

    assert await asyncio.to_thread(host.stop) == 0
    log = host.log_path.read_text()
    [ready] = [line for line in log.splitlines() if line.startswith("host: ready")]
    assert ("port=" in ready) == serves_http, ready
    assert "port=None" not in log
    assert "host: stopped" in log
    for noise in ("Traceback", "Unclosed", "Error", "ERROR", "never retrieved"):
        assert noise not in log, log[-3000:]


async def test_health_names_a_queue_worker_that_stopped_and_why(
    own_azurite: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loyalty worker's storage fails in a way no worker handles (a crash inside its
    receive): the host keeps serving, and /api/health says which worker stopped and why."""
    environ = environment(own_azurite)
    app_account = AzureStorageAccount(StorageSettings(own_azurite.connection_string))
    # The app's worker (what function_app.py binds at import) on this test's emulator.
    monkeypatch.setattr(runtime, "_worker", runtime.Worker.for_account(app_account))
    app = load_functions(REPO_ROOT / "function_app.py", environ, {"health", "orders", "loyalty"})
    config = HostConfig(
        QueueSettings(max_polling_interval=1.0, lease_seconds=5, renew_lease=True),
        function_timeout=10,
        drain_seconds=5,
    )
    host = LocalHost(app, config, environ, Keys(KEY, "master"))

    def crash_loyalty_receive(operation: Operation) -> Fault | None:
        if (operation.kind, operation.target) == ("queue.receive", "loyalty"):
            return Fault.CRASH_BEFORE
        return None

    # The host's own storage client for the trigger connection, with the fault in its path.
    host.accounts["AzureWebJobsStorage"] = InstrumentedAccount(
        AzureStorageAccount(StorageSettings(own_azurite.connection_string)),
        Instrumentation(plan=crash_loyalty_receive),
    )
    stopping, ready = asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(host.run(stopping, "127.0.0.1", 0, lambda _: ready.set()))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        status, report = await poll_health(f"http://127.0.0.1:{host.port}/api/health?code={KEY}")
        assert status == 503
        assert report["healthy"] is False
        assert report["stopped"] == [
            "queue loyalty: ended with SimulatedCrash('crash before queue.receive loyalty')"
        ]
        assert (report["missing"], report["errors"]) == ([], [])
        # The other worker still runs: an order sent now is taken off its queue.
        await send_order(own_azurite, "health-still-running")
        assert await queue_drained(own_azurite, "orders", 30)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
        await app_account.close()


async def poll_health(url: str, seconds: float = 15) -> tuple[int, dict[str, object]]:
    """The health answer once it is not 200, or the last 200 after ``seconds``."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(url) as response:
                status, report = response.status, json.loads(await response.text())
            if status != 200 or time.monotonic() > deadline:
                return status, report
            await asyncio.sleep(0.3)
