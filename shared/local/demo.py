"""``make demo``: the main job, run against an embedded Azurite.

At this stage of the project it proves the storage foundation end to end: it starts the
emulator, provisions every resource named in ``infra/resources.json``, checks each one answers,
and runs the claim compare-and-swap that the protocol is built on. The exactly-once message
demo replaces the last step as the pipeline lands.
"""

from __future__ import annotations

import asyncio
import sys
import time

from shared.errors import PreconditionFailed
from shared.health import check_storage
from shared.local.azurite import Azurite
from shared.provisioning import provision
from shared.resources import load_resources
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount


async def run(connection_string: str) -> bool:
    resources = load_resources()
    async with AzureStorageAccount(StorageSettings(connection_string)) as account:
        started = time.perf_counter()
        report = await provision(account, resources)
        print(f"  {report.summary()} in {time.perf_counter() - started:.2f}s")
        health = await check_storage(account, resources)
        print(
            f"  health: {health.checked} resources checked, missing={len(health.missing)}, "
            f"errors={len(health.errors)}"
        )

        tokens = account.blob_container(resources.containers["tokens"])
        etag = await tokens.create("demo/claim-check", b"{}", {"claim": ""})
        await tokens.set_metadata("demo/claim-check", {"claim": "first"}, etag=etag)
        try:
            await tokens.set_metadata("demo/claim-check", {"claim": "second"}, etag=etag)
            cas_ok = False
        except PreconditionFailed:
            cas_ok = True
        claim = (await tokens.read("demo/claim-check")).metadata["claim"]
        await tokens.delete("demo/claim-check")
        print(f"  claim compare-and-swap: second claimer refused={cas_ok}, owner={claim}")
        return health.healthy and cas_ok and claim == "first"


def main() -> int:
    print("demo: starting Azurite on free ports")
    with Azurite() as endpoints:
        print(f"  blob {endpoints.blob}  queue {endpoints.queue}  table {endpoints.table}")
        ok = asyncio.run(run(endpoints.connection_string))
    print(f"demo: storage foundation verdict={'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
