"""A cleanup instance killed in the middle of a task: the next pass takes the task over from
its checkpoint once the (short, heartbeat-renewed) lease runs out, and leaves no residue."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid

import pytest

from lab.cleanup.bench import seed
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.cleanup.job import run_cleanup
from shared.errors import NotFound
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from tests.cleanup.residue import Residue

pytestmark = pytest.mark.azurite

N = 150
LEASE_SECONDS = 3.0
ZERO = {"tokens": 0, "outbox": 0, "audit": 0, "ingress": 0}


async def _mid_task(account: StorageAccount, residue: Residue) -> bool:
    """Some task has saved a checkpoint in the middle of its records."""
    try:
        return any(e["continuation"] for e in await residue.checkpoints(account))
    except NotFound:
        return False  # the instance has not created its checkpoint table yet


async def test_a_pass_after_an_instance_was_killed_mid_task_leaves_no_residue(
    azurite: AzuriteEndpoints,
) -> None:
    residue = Residue(uuid.uuid4().hex[:8])
    storage = StorageSettings(azurite.connection_string)
    async with AzureStorageAccount(storage) as account:
        await seed(account, residue.config, residue.endpoint, N)
        assert await residue.left(account) == dict.fromkeys(ZERO, N)

        # Given a cleanup instance, a process of its own, killed while in the middle of a task
        process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "tests.cleanup.cleanup_process"],
            *[azurite.connection_string, residue.suffix, str(LEASE_SECONDS)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        try:
            deadline = time.monotonic() + 60
            while not await _mid_task(account, residue):
                assert process.returncode is None, "the instance ended before it was killed"
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            process.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(process.wait(), 10) == -signal.SIGKILL
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        left = await residue.left(account)
        assert sum(left.values()) > 0

        # When a pass starts at once, the dead instance's leases are still live: it says so
        busy = await run_cleanup(
            account,
            residue.endpoints,
            rows=residue.rows(account),
            config=residue.config,
            settings=residue.settings(lease_seconds=LEASE_SECONDS),
        )
        leased = [t for t in busy.tasks if t.skipped == "leased by another instance"]
        assert leased
        assert all((t.leased_by or "").startswith("doomed-instance") for t in leased)

        # Then a pass that waits for the leases takes the interrupted tasks over from their
        # checkpoints, carries on to the end, and leaves nothing behind
        started = time.monotonic()
        report = await run_cleanup(
            account,
            residue.endpoints,
            rows=residue.rows(account),
            config=residue.config,
            settings=residue.settings(lease_seconds=LEASE_SECONDS),
            wait=True,
        )
        assert report.complete, report.to_dict()
        assert any(t.resumed for t in report.tasks)
        assert time.monotonic() - started < LEASE_SECONDS + 30
        assert await residue.left(account) == ZERO
