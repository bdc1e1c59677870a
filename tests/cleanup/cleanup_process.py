"""A cleanup instance as a process of its own, for tests that kill it: one pass of the cleanup
job over the residue ``lab.cleanup.bench.seed`` wrote, slowed by a per-request latency so
that a test can stop it in the middle of a task.

    python -m tests.cleanup.cleanup_process <connection string> <suffix> <lease seconds>
"""

from __future__ import annotations

import asyncio
import sys

from shared.cleanup.job import run_cleanup
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.latency import LatencyAccount
from tests.cleanup.residue import Residue


async def main(connection_string: str, suffix: str, lease_seconds: float) -> None:
    residue = Residue(suffix)
    async with AzureStorageAccount(StorageSettings(connection_string)) as account:
        slowed = LatencyAccount(account, 0.05)
        await run_cleanup(
            slowed,
            residue.endpoints,
            rows=residue.rows(slowed),
            config=residue.config,
            settings=residue.settings(lease_seconds=lease_seconds, page_size=10, concurrency=2),
            owner="doomed-instance",
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
