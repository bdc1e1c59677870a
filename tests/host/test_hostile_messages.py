"""Hostile queue messages against the local host running the real function app: each is parked
with its reason, no worker stops, and valid traffic flows past them. A message whose handler
keeps failing is parked on its last try with its last error. Every message gets a log line."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.storage.queue.aio import QueueClient

from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from lab.local.outcome_log import OUTCOME_LOG_SETTING
from shared import runtime
from shared.bus.poison import unwrap
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.sample.app import ChargePayment, FireAt
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.table import Entity
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

NON_ASCII = "ünïcödé ☃ {"
NOT_UTF8 = base64.b64encode(b"\xff\xfe\x00 not utf-8").decode()
OVERSIZED = "!" * 60_000  # not base64: 60,000 characters that re-encode to 80,000


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: the sample app's resource names are fixed


def host_for(endpoints: AzuriteEndpoints, work: Path) -> HostProcess:
    """The repository's function app with its host.json, retries made immediate."""
    host_json = json.loads((REPO_ROOT / "host.json").read_text())
    host_json["extensions"]["queues"]["visibilityTimeout"] = "00:00:00"
    (work / "host.json").write_text(json.dumps(host_json))
    return HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": endpoints.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            OUTCOME_LOG_SETTING: str(work / "outcomes.jsonl"),
        },
        work / "host.log",
        args=["--lease-seconds", "2", "--host-json", str(work / "host.json"), "--verbose"],
    )


async def send_raw(connection_string: str, queue: str, wire: str) -> None:
    """As another tool would: the text as it is, not base64-encoded."""
    async with QueueClient.from_connection_string(connection_string, queue) as client:
        await client.send_message(wire)


async def parked(account: StorageAccount, endpoint: str) -> list[str]:
    return [m.content for m in await account.queue(poison_queue(endpoint)).peek()]


async def test_hostile_messages_are_parked_and_the_workers_keep_going(
    own_azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    host = host_for(own_azurite, tmp_path)
    connection = own_azurite.connection_string
    async with AzureStorageAccount(StorageSettings(connection)) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        bus = worker.bus()
        await bus.subscribe_all()
        await send_raw(connection, "loyalty", NON_ASCII)
        await send_raw(connection, "leaderboard", NOT_UTF8)
        await send_raw(connection, "shipping", OVERSIZED)
        # A state row the handler's model cannot read: every delivery of a charge fails.
        await account.table("payments").upsert(
            Entity("broken", "state", {"type": "Order", "data": "not json"})
        )
        client = bus.client("test")
        charge = await client.send(
            ChargePayment(order_id="broken", amount_cents=5), to="payments", idempotency_key="c"
        )
        shots = [
            (
                await client.send(
                    FireAt(game_id="g", position=n), to="shootingrange", idempotency_key=f"s{n}"
                )
            ).message_ids[0]
            for n in range(3)
        ]

        await asyncio.to_thread(host.start)
        deadline = time.monotonic() + 90
        waiting = ("loyalty", "leaderboard", "shipping", "payments")
        # The host is another process: polling storage is the only way to watch it.
        while time.monotonic() < deadline:
            if all([await parked(account, e) for e in waiting]) and await demo.quiescent(
                account, time.monotonic() + 3
            ):
                break
            await asyncio.sleep(0.2)
        still_running = host.process is not None and host.process.poll() is None
        assert await asyncio.to_thread(host.stop) == 0

        [loyalty] = await parked(account, "loyalty")
        assert unwrap(loyalty, "loyalty").signal == NON_ASCII
        assert "not JSON" in unwrap(loyalty, "loyalty").reason
        [leaderboard] = await parked(account, "leaderboard")
        assert unwrap(leaderboard, "leaderboard").signal == NOT_UTF8  # whole, as its base64
        [shipping] = await parked(account, "shipping")
        excerpt = unwrap(shipping, "shipping")  # no token named: an excerpt, no blob
        assert excerpt.excerpt_only
        assert "signal is 60000 characters" in excerpt.reason
        assert excerpt.info["sha256"] == hashlib.sha256(OVERSIZED.encode()).hexdigest()
        assert [b.name async for b in account.blob_container("parked").list()] == []
        [payments] = await parked(account, "payments")
        failed = unwrap(payments, "payments")
        assert failed.info["error_type"] == "ValidationError"
        assert failed.info["message_type"] == "ChargePayment"
        assert failed.info["message_id"] == charge.message_ids[0]
        assert failed.info["endpoint"] == "payments"
        assert failed.info["dequeue_count"] == 5
        for queue in ("loyalty", "leaderboard", "shipping", "payments", "shootingrange"):
            assert await account.queue(queue).approximate_count() == 0, queue

    assert still_running
    log = (tmp_path / "host.log").read_text()
    assert "ended with" not in log
    assert "ended abruptly" not in log
    for shot in shots:  # one line per message, with what it was and how it ended
        assert f"endpoint=shootingrange type=FireAt message_id={shot} outcome=processed" in log
    assert "failed (try 1 of 5): ValidationError" in log
    assert f"receiving message {charge.message_ids[0]} of type ChargePayment" in log
    outcomes = [json.loads(line) for line in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    assert (
        sum(o["endpoint"] == "leaderboard" and o["outcome"] == "processed" for o in outcomes) == 3
    )
