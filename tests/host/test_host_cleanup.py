"""Two local hosts serving one app, their cleanup timers running, SIGKILLed at random while
they work: once the queues are drained, one cleanup pass leaves no residue, whatever leases
and checkpoints the killed instances left behind."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import runtime
from shared.provisioning import provision
from shared.sample.app import FireAt, PlaceOrder
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

KILLS = 4
GRACE_SECONDS = 15
"""The timers' grace: longer than any invocation of this test takes, so that they never
judge a token of a round still running (the production default is 10 minutes)."""


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: these tests read the sample app's fixed-name tables


def host_for(endpoints: AzuriteEndpoints, work: Path, name: str) -> HostProcess:
    return HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": endpoints.connection_string,
            "CLEANUP_SCHEDULE": "*/2 * * * * *",
            "CLEANUP_GRACE_SECONDS": str(GRACE_SECONDS),
            "CLEANUP_LEASE_SECONDS": "3",
            "CLEANUP_PAGE_SIZE": "5",
        },
        work / f"{name}.log",
        args=["--lease-seconds", "2"],
    )


async def send_work(
    worker: runtime.Worker, orders: dict[str, int], shots: Counter[str]
) -> set[str]:
    bus = worker.bus()
    await bus.subscribe_all()
    client, roots = bus.client("test"), set()
    for order_id, amount in orders.items():
        cmd = PlaceOrder(
            order_id=order_id, customer=f"cust{int(order_id[5:]) % 20}", amount_cents=amount
        )
        roots |= set((await client.send(cmd, to="orders", idempotency_key=order_id)).message_ids)
    for game, count in shots.items():
        for n in range(count):
            shot = FireAt(game_id=game, position=n)
            receipt = await client.send(shot, to="shootingrange", idempotency_key=f"{game}-{n}")
            roots |= set(receipt.message_ids)
    return roots


async def test_two_hosts_killed_at_random_leave_no_residue_after_one_cleanup_pass(
    own_azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    rng = random.Random(18)
    orders = {f"order{i}": 100 * (i + 1) for i in range(12)}
    shots: Counter[str] = Counter({"g0": 3, "g1": 2})
    fired = sum(shots.values())
    expected = demo.DELIVERIES_PER_ORDER * len(orders) + demo.DELIVERIES_PER_SHOT * fired
    hosts = [host_for(own_azurite, tmp_path, name) for name in ("a", "b")]
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        roots = await send_work(worker, orders, shots)

        # Given two hosts working, their cleanup timers every 2 s, each SIGKILLed at random
        # moments and restarted
        for host in hosts:
            await asyncio.to_thread(host.start)
        for _ in range(KILLS):
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            victim = rng.choice(hosts)
            victim.kill()
            await asyncio.to_thread(victim.start)
        assert await demo.quiescent(account, time.monotonic() + 180)

        # When the queues are drained, one host dies once more (its cleanup maybe mid-task,
        # its leases left behind) while the other's timer keeps running
        await asyncio.sleep(rng.uniform(0.0, 2.0))
        hosts[0].kill()
        report = await worker.cleanup(grace_seconds=0, wait=True)
        assert await asyncio.to_thread(hosts[1].stop) == 0

        verdict = await demo.verify(account, roots, orders, shots, 0, worker.config)
    # Then the one pass finished every task, and nothing is left but the business state
    assert report["complete"], report
    assert verdict.state_errors == []
    assert (verdict.sent, verdict.processed, verdict.lost, verdict.ghosts) == (
        expected,
        expected,
        0,
        0,
    )
    assert verdict.residue == 0
