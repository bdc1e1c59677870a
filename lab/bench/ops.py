"""``python -m lab.bench.ops``: what one storage operation of each kind costs, one by one.

``make bench`` says how much CPU a message costs in each mode, in the host and in the emulator.
This says where it comes from: it issues each kind of operation the pipelines use, one at a
time, against a fresh Azurite, and prints per operation the host's CPU, the emulator's CPU and
the wall time. Multiplying by the operation counts of ``make bench`` rebuilds a mode's cost, and
shows which operations would have to go for a mode to get cheaper (docs/benchmarks.md).

The operations run in sequence on one connection, so the figures carry no queueing; rows of
other partitions are added first so that table operations do not run on an empty table.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from lab.bench.cli import process_cpu_seconds
from lab.local.azurite import Azurite
from shared.errors import ConfigurationError
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.queue import QueueMessage
from shared.stores.table import Entity, Insert, Upsert

PAYLOAD = "x" * 300
"""About the size of a benchmark state row, audit row or envelope."""
FILL_ROWS = 2000


@dataclass(frozen=True)
class OperationCost:
    kind: str
    count: int
    client_cpu_ms: float
    emulator_cpu_ms: float
    wall_ms: float


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(
    kind: str, count: int, emulator_pid: int, operation: Callable[[int], Awaitable[object]]
) -> OperationCost:
    client, emulator = _own_cpu_seconds(), process_cpu_seconds(emulator_pid)
    started = time.perf_counter()
    for i in range(count):
        await operation(i)
    wall = time.perf_counter() - started
    per_op = 1000 / count
    return OperationCost(
        kind,
        count,
        (_own_cpu_seconds() - client) * per_op,
        (process_cpu_seconds(emulator_pid) - emulator) * per_op,
        wall * per_op,
    )


async def measure_operations(
    account: StorageAccount, emulator_pid: int, count: int, fill_rows: int = FILL_ROWS
) -> list[OperationCost]:
    """Every operation kind of the pipelines, ``count`` times each, in pipeline order."""
    table = account.table("opscost")
    blobs = account.blob_container("opscost")
    queue = account.queue("opscost")
    for store in (table, blobs, queue):
        await store.create_if_missing()
    for start in range(0, fill_rows, 100):
        await table.transact(
            [Insert(Entity(f"fill{start}", f"r{k}", {"data": PAYLOAD})) for k in range(100)]
        )
    row = {"data": PAYLOAD}
    received: list[QueueMessage] = []
    etags: dict[int, str] = {}

    async def receive(i: int) -> None:
        received.extend(await queue.receive(1, visibility_timeout=300))

    async def claim(i: int) -> None:
        etags[i] = await blobs.set_metadata(f"token{i}", {"claim": "c"}, etag=etags[i])

    async def create(i: int) -> None:
        etags[i] = await blobs.create(f"token{i}", PAYLOAD.encode(), {"origin": "o"})

    steps: Sequence[tuple[str, Callable[[int], Awaitable[object]]]] = [
        ("queue.send", lambda i: queue.send(PAYLOAD)),
        ("queue.receive (1 message)", receive),
        ("blob.create", create),
        ("blob.read", lambda i: blobs.read(f"token{i}")),
        ("blob.set_metadata (If-Match)", claim),
        ("table.insert", lambda i: table.insert(Entity(f"p{i}", "outbox|m", row))),
        ("table.get", lambda i: table.get(f"p{i}", "outbox|m")),
        ("table.upsert", lambda i: table.upsert(Entity(f"p{i}", "state", row))),
        (
            "table.query (1 partition, 2 rows)",
            lambda i: table.query(partition_key=f"p{i}", row_keys=["state", "outbox|m"]),
        ),
        (
            "table.transact (3 entities)",
            lambda i: table.transact(
                [
                    Upsert(Entity(f"p{i}", "state", row)),
                    Upsert(Entity(f"p{i}", "outbox|m", row)),
                    Insert(Entity(f"p{i}", "audit|m", row)),
                ]
            ),
        ),
        ("blob.delete", lambda i: blobs.delete(f"token{i}")),
        ("queue.delete", lambda i: queue.delete(received[i].id, received[i].pop_receipt)),
    ]
    return [await _measure(kind, count, emulator_pid, step) for kind, step in steps]


def table_lines(costs: Sequence[OperationCost]) -> list[str]:
    lines = [
        f"{'operation':36} {'client cpu ms':>13} {'emulator cpu ms':>15} {'wall ms':>8}",
        "-" * 75,
    ]
    lines += [
        f"{c.kind:36} {c.client_cpu_ms:13.2f} {c.emulator_cpu_ms:15.2f} {c.wall_ms:8.2f}"
        for c in costs
    ]
    return lines


async def _run(count: int) -> list[OperationCost]:
    emulator = Azurite()
    endpoints = emulator.start()
    try:
        if emulator.process is None:
            raise ConfigurationError("azurite stopped before its operations could be measured")
        async with AzureStorageAccount(StorageSettings(endpoints.connection_string)) as account:
            return await measure_operations(account, emulator.process.pid, count)
    finally:
        emulator.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.ops", description=__doc__)
    parser.add_argument("--count", type=int, default=300, help="operations of each kind")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    print(f"ops: {args.count} of each operation, one at a time, on a fresh Azurite", flush=True)
    for line in table_lines(asyncio.run(_run(args.count))):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
