"""What measuring the backlog adds to a cleanup pass (``shared.cleanup.backlog``): for each N
it seeds N tokens in flight on a fresh Azurite (with the metadata the bus writes: claim,
origin, format) and times ``measure_backlog`` over them, with and without a limit, printing
the wall time, the listing requests (5,000 names each) and the CPU seconds of the client and
of the emulator. Figures, not a timed test (docs/alerts.md, "What the measurement costs").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
import uuid

from lab.cleanup.bench import SEED_CONCURRENCY, _bounded
from lab.cleanup.bench_timing import process_cpu_seconds
from lab.local.azurite import Azurite
from shared.bus.envelope import token_name
from shared.bus.ids import fresh_id
from shared.bus.origin import Origin
from shared.bus.records import outbox_row
from shared.cleanup.backlog import LIST_PAGE as PAGE
from shared.cleanup.backlog import measure_backlog
from shared.clock import to_datetime
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

ENDPOINTS = 3


async def seed(account: StorageAccount, container: str, endpoints: list[str], n: int) -> None:
    tokens = account.blob_container(container)
    await tokens.create_if_missing()
    for endpoint in endpoints:
        await account.queue(f"{endpoint}-poison").create_if_missing()

    def create(index: int):  # type: ignore[no-untyped-def]
        sender = endpoints[index % len(endpoints)]
        incoming = fresh_id()
        origin = Origin(sender, f"p{index % 97}", outbox_row(incoming)).encode()
        name = token_name(sender, incoming, fresh_id(), fresh_id(), b"{}")
        return lambda: tokens.create(name, b"{}", {"claim": "", "origin": origin})

    await _bounded([create(i) for i in range(n)])


async def measure(
    account: StorageAccount, container: str, endpoints: list[str], limit: int, pid: int | None
) -> dict[str, object]:
    server_before, client_before = process_cpu_seconds(pid), time.process_time()
    started = time.monotonic()
    backlog = await measure_backlog(
        account, endpoints, container, to_datetime(time.time()), max_tokens=limit
    )
    seconds = time.monotonic() - started
    server_after = process_cpu_seconds(pid)
    counted = sum(t.count for t in (backlog.tokens or {}).values())
    return {
        "limit": limit,
        "counted": counted,
        "complete": backlog.tokens_complete,
        "seconds": round(seconds, 3),
        "list_requests": max(1, math.ceil((counted + (not backlog.tokens_complete)) / PAGE)),
        "queue_requests": len(endpoints),
        "client_cpu": round(time.process_time() - client_before, 3),
        "azurite_cpu": None
        if server_before is None or server_after is None
        else round(server_after - server_before, 3),
    }


async def run(n: int, limits: list[int]) -> list[dict[str, object]]:
    suffix = uuid.uuid4().hex[:8]
    endpoints = [f"bench{i}{suffix}" for i in range(ENDPOINTS)]
    container = f"benchtokens{suffix}"
    emulator = Azurite()
    with emulator as endpoints_of:
        pid = None if emulator.process is None else emulator.process.pid
        settings = StorageSettings(connection_string=endpoints_of.connection_string)
        async with AzureStorageAccount(settings) as account:
            started = time.monotonic()
            await seed(account, container, endpoints, n)
            seeded = time.monotonic() - started
            results = []
            for limit in limits:
                result = await measure(account, container, endpoints, limit or n, pid)
                results.append({"n": n, "seed_seconds": round(seeded, 1), **result})
            return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.cleanup.backlog_bench", description=__doc__)
    p.add_argument("--n", type=int, nargs="+", default=[1000, 5000, 20000])
    p.add_argument(
        "--limit",
        type=int,
        nargs="+",
        default=[0, 5000],
        help="token limits to measure with; 0: no limit (N)",
    )
    args = p.parse_args(argv)
    print(f"seeding {SEED_CONCURRENCY} creates at once", flush=True)
    for n in args.n:
        for result in asyncio.run(run(n, args.limit)):
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
