"""The local host over a storage account that stops answering (its own emulator, frozen with
SIGSTOP): POST /api/messages answers 503 within the bound its storage timeouts set instead
of hanging; once storage answers again (SIGCONT) the client's retry with the same key is
accepted, the message is processed exactly once, and the queue workers that failed meanwhile
have recovered.

The host runs with short timeouts, set as app settings the way an operator sets them, so that
the test waits seconds, not the defaults' 8 to 12; that the defaults keep within the bound
docs/deploy.md states is checked on their values."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT
from shared import runtime
from shared.provisioning import provision
from shared.settings import StorageSettings, StorageTimeouts
from shared.stores.azure import AzureStorageAccount
from tests.frozen_azurite import FreezableAzurite, started_freezable

pytestmark = pytest.mark.azurite

STATED_BOUND = 15.0
"""docs/deploy.md: a frozen account gets a 503 within 15 s (the default timeouts)."""
TIMEOUTS = StorageTimeouts(connect=1.0, read=1.0, call=2.0, ingress=4.0)
"""The host's timeouts here: its answer must come within ``ingress`` plus ``MARGIN``, well
before the default call timeout (8 s) would end a call."""
MARGIN = 3.0
"""Seconds beyond the ingress timeout for the answer to reach the client (the stated bound
allows as much beyond the default)."""
FUNCTION_KEY = "frozen-storage-key"
ORDER = {
    "type": "PlaceOrder",
    "to": "orders",
    "body": {"order_id": "order7", "customer": "cust7", "amount_cents": 700},
}


@pytest.fixture(scope="module")
def azurite() -> Iterator[FreezableAzurite]:
    yield from started_freezable()  # private: frozen, and the sample app's names are fixed


def host_for(azurite: FreezableAzurite, work: Path) -> HostProcess:
    # Only this test's BUS_STORAGE_*/BUS_INGRESS_TIMEOUT, none from the environment.
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("BUS_STORAGE_", "BUS_IN"))}
    return HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **environ,
            "AzureWebJobsStorage": azurite.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            "BUS_HOST_FUNCTION_KEY": FUNCTION_KEY,
            "BUS_STORAGE_CONNECT_TIMEOUT": str(TIMEOUTS.connect),
            "BUS_STORAGE_READ_TIMEOUT": str(TIMEOUTS.read),
            "BUS_STORAGE_CALL_TIMEOUT": str(TIMEOUTS.call),
            "BUS_INGRESS_TIMEOUT": str(TIMEOUTS.ingress),
        },
        work / "host.log",
        args=["--lease-seconds", "2", "--verbose"],
    )


async def post(session: aiohttp.ClientSession, host: HostProcess) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{host.url}/api/messages",
        json=ORDER,
        headers={"Idempotency-Key": "frozen-order7", "x-functions-key": FUNCTION_KEY},
    ) as response:
        return response.status, await response.json()


async def test_a_frozen_account_gets_503_in_time_and_the_retry_is_processed_once(
    azurite: FreezableAzurite, tmp_path: Path
) -> None:
    assert StorageTimeouts().ingress + MARGIN <= STATED_BOUND
    host = host_for(azurite, tmp_path)
    log = tmp_path / "host.log"
    settings = StorageSettings(azurite.connection_string)
    async with (
        AzureStorageAccount(settings) as account,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
    ):
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        await worker.bus().subscribe_all()
        await asyncio.to_thread(host.start)
        try:
            with azurite.frozen():
                started = time.monotonic()
                status, body = await post(session, host)
                answered_in = time.monotonic() - started
                assert status == 503, body
                assert "retry with the same Idempotency-Key" in str(body["error"])
                # The queue workers polled the frozen account too, and failed.
                deadline = time.monotonic() + TIMEOUTS.call + 5
                while "receive failed" not in log.read_text() and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
                assert "receive failed" in log.read_text()
            assert answered_in < TIMEOUTS.ingress + MARGIN

            status, body = await post(session, host)  # the client's retry, same key
            assert status in (200, 202), body
            roots = {str(m) for m in body["message_ids"]}
            assert len(roots) == 1
            # Processing the order after the thaw shows that the workers recovered.
            assert await demo.quiescent(account, time.monotonic() + 60)
            assert host.process is not None
            assert host.process.poll() is None, "the host died while storage was frozen"
        finally:
            stopped = await asyncio.to_thread(host.stop)
        assert stopped == 0

        await worker.cleanup(grace_seconds=0)
        verdict = await demo.verify(account, roots, {"order7": 700}, Counter(), 0, worker.config)
    assert verdict.state_errors == []
    # A PlaceOrder's deliveries in the sample app (its charge's request and answer among them),
    # each processed once.
    one_order = demo.DELIVERIES_PER_ORDER
    assert (verdict.sent, verdict.processed, verdict.lost, verdict.ghosts) == (
        one_order,
        one_order,
        0,
        0,
    )
    assert verdict.residue == 0
