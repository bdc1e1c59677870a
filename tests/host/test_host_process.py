"""The local host as a separate process: killed with SIGKILL mid-run and restarted, the work
still completes exactly once, each order charged once at a payment provider of the module's
own; a SIGTERM stops it gracefully."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from lab.local.outcome_log import OUTCOME_LOG_SETTING
from lab.local.payments import Provider
from lab.provider.process import provider_process
from shared import runtime
from shared.provisioning import provision
from shared.sample.app import FireAt, PlaceOrder
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    """The sample app's resource names are fixed, and this module checks every row."""
    yield from started_azurite()  # private: these tests read the sample app's fixed-name tables


@pytest.fixture(scope="module")
def own_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """A payment provider whose ledger holds this module's charges only, so that the check of
    it can say that nothing else was charged."""
    credential = secrets.token_urlsafe(24)
    with provider_process(tmp_path_factory.mktemp("provider"), credential=credential) as url:
        yield Provider(url, credential)


def host_for(endpoints: AzuriteEndpoints, work: Path, provider: Provider) -> HostProcess:
    return HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            **provider.app_settings(),
            "AzureWebJobsStorage": endpoints.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            OUTCOME_LOG_SETTING: str(work / "outcomes.jsonl"),
        },
        work / "host.log",
        args=["--lease-seconds", "2"],
    )


async def test_work_completes_exactly_once_after_the_host_is_killed_mid_run(
    own_azurite: AzuriteEndpoints, own_provider: Provider, tmp_path: Path
) -> None:
    orders = {f"order{i}": 100 * (i + 1) for i in range(6)}
    shots: Counter[str] = Counter({"g0": 2, "g1": 1})
    fired = sum(shots.values())
    expected = demo.DELIVERIES_PER_ORDER * len(orders) + demo.DELIVERIES_PER_SHOT * fired
    host = host_for(own_azurite, tmp_path, own_provider)
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        bus = worker.bus()
        await bus.subscribe_all()
        client, roots = bus.client("test"), set()
        for order_id, amount in orders.items():
            # customers as the demo's verification expects them: cust<order number % 20>
            customer = f"cust{int(order_id[5:]) % 20}"
            cmd = PlaceOrder(order_id=order_id, customer=customer, amount_cents=amount)
            roots |= set(
                (await client.send(cmd, to="orders", idempotency_key=order_id)).message_ids
            )
        for game, count in shots.items():
            for n in range(count):
                shot = FireAt(game_id=game, position=n)
                receipt = await client.send(shot, to="shootingrange", idempotency_key=f"{game}-{n}")
                roots |= set(receipt.message_ids)

        await asyncio.to_thread(host.start)
        outcomes = tmp_path / "outcomes.jsonl"
        deadline = time.monotonic() + 120
        # The host is another process writing a file: polling is the only way to watch it.
        while demo.processed_so_far(outcomes) < 8 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        host.kill()
        at_kill = demo.processed_so_far(outcomes)
        assert 8 <= at_kill < expected, "the kill must land mid-run"
        assert host.process is not None
        assert host.process.returncode == -9

        await asyncio.to_thread(host.start)
        assert await demo.quiescent(account, time.monotonic() + 120)
        assert await asyncio.to_thread(host.stop) == 0  # SIGTERM: a graceful stop
        assert "host: stopped" in (tmp_path / "host.log").read_text()

        await worker.cleanup(grace_seconds=0)
        async with aiohttp.ClientSession() as session:
            ledger = await own_provider.ledger(session)
        config = worker.config
        verdict = await demo.verify(account, roots, orders, shots, 0, config, ledger=ledger)
    assert verdict.state_errors == []
    assert (verdict.charges, verdict.refunds) == (len(orders), 0)
    assert (verdict.sent, verdict.processed, verdict.lost, verdict.ghosts) == (
        expected,
        expected,
        0,
        0,
    )
    assert verdict.residue == 0


async def test_the_host_process_runs_on_the_environment_given_not_a_settings_file_beside_the_app(
    own_azurite: AzuriteEndpoints, own_provider: Provider, tmp_path: Path
) -> None:
    """A developer's checkout holds a local.settings.json copied from the sample beside
    function_app.py: the host that the tests and the demo start runs on the connection they
    give, not on a mix of both (refused as ambiguous)."""
    checkout, work = tmp_path / "checkout", tmp_path / "work"
    checkout.mkdir()
    work.mkdir()
    for name in ("function_app.py", "host.json"):
        shutil.copy(REPO_ROOT / name, checkout / name)
    shutil.copy(REPO_ROOT / "local.settings.sample.json", checkout / "local.settings.json")
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        await provision(account, runtime.Worker.for_account(account).resources)
    host = host_for(own_azurite, work, own_provider)
    host.app = checkout / "function_app.py"

    await asyncio.to_thread(host.start)
    try:
        log = (work / "host.log").read_text()
        assert "host: ready" in log
        assert "ambiguous" not in log
    finally:
        assert await asyncio.to_thread(host.stop) == 0


@pytest.mark.slow
def test_the_full_demo_passes() -> None:
    """``make demo`` itself: the sample system's three apps in three hosts, duplicates,
    crashes and a SIGKILL in each, one host down and one state account frozen mid-run."""
    assert demo.main([]) == 0


@pytest.mark.slow
def test_the_single_app_demo_passes() -> None:
    """``--single``: the sample app alone in one host, 1,440 deliveries, duplicates, crashes
    and a SIGKILL, then the Spark audit."""
    assert demo.main(["--single"]) == 0
