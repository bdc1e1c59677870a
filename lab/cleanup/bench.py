"""``make cleanup-bench``: how fast one cleanup pass removes a large residue.

For each N it seeds N abandoned tokens, N retired outbox records, N expired ingress records
and N expired audit rows, runs one pass of the cleanup job (``run_cleanup``, default settings
and a zero grace period, what ``bus cleanup --grace-seconds 0`` runs) and prints the items
removed per second, the storage requests per removed item and whether the pass completed.
Two backends: Azurite (a fresh emulator per N), and the in-memory store behind a fixed
per-request latency (``shared.stores.latency``, 10 ms by default) that stands for Azure's
round trips where the emulator's CPU would be the limit. Figures, not a timed test.

Seeding writes straight to the stores (not counted); only the pass goes through the counting
and latency wrappers. Each run also prints the CPU seconds of the client and of the emulator
during the pass, and with ``--breakdown`` the requests of each kind
(``lab.cleanup.bench_timing``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lab.cleanup.bench_timing import RequestTimes, TimedAccount, process_cpu_seconds
from lab.local.azurite import Azurite
from shared.bus.config import BusConfig
from shared.bus.envelope import token_name
from shared.bus.ids import fresh_id
from shared.bus.ingress import INGRESS_ROW
from shared.bus.origin import Origin
from shared.bus.records import AuditRecord, OutboxRecord, outbox_row
from shared.bus.state.rows import TableRows
from shared.cleanup.job import run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import InstrumentedAccount
from shared.stores.latency import LatencyAccount
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity, Insert, Table

TOKENS_PER_ROUND = 2
"""Abandoned tokens are seeded as crashed rounds that each created two tokens (one origin)."""
ROWS_PER_PARTITION = 20
"""Outbox and audit rows are spread over N / 20 partitions, as messages over entities."""
SEED_CONCURRENCY = 32


@dataclass(frozen=True)
class Result:
    backend: str
    n: int
    seeded: int
    removed: int
    seconds: float
    requests: int
    complete: bool
    per_task: dict[str, int]
    skipped: dict[str, str]
    client_cpu: float
    """CPU seconds of this process during the pass."""
    server_cpu: float | None
    """CPU seconds of the emulator during the pass (None for the in-memory store)."""
    times: RequestTimes

    @property
    def items_per_second(self) -> float:
        return self.removed / self.seconds if self.seconds else 0.0

    @property
    def requests_per_item(self) -> float:
        return self.requests / self.removed if self.removed else float("inf")

    def line(self) -> str:
        tasks = ", ".join(f"{task} {count}" for task, count in self.per_task.items())
        return (
            f"{self.backend:<16} N={self.n:<6} removed {self.removed:>6}/{self.seeded:<6} "
            f"in {self.seconds:7.1f} s  {self.items_per_second:7.0f} items/s  "
            f"{self.requests_per_item:5.2f} requests/item  "
            f"complete={'yes' if self.complete else 'no'}  [{tasks}]"
            + "".join(f"\n    {task} stopped: {why}" for task, why in self.skipped.items())
            + f"\n    CPU: client {self.client_cpu:.1f} s"
            + ("" if self.server_cpu is None else f", Azurite {self.server_cpu:.1f} s")
            + f"; load average {os.getloadavg()[0]:.1f}"
        )

    def to_dict(self) -> dict[str, object]:
        fields = {k: v for k, v in self.__dict__.items() if k != "times"}
        return {**fields, "requests_by_kind": self.times.calls}


async def _bounded(calls: Sequence[Callable[[], Awaitable[object]]]) -> None:
    limit = asyncio.Semaphore(SEED_CONCURRENCY)

    async def one(call: Callable[[], Awaitable[object]]) -> None:
        async with limit:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


async def _insert_rows(table: Table, rows: list[Entity]) -> None:
    by_partition: dict[str, list[Entity]] = {}
    for row in rows:
        by_partition.setdefault(row.partition_key, []).append(row)
    batches = [
        part[i : i + 100] for part in by_partition.values() for i in range(0, len(part), 100)
    ]

    def insert(batch: list[Entity]) -> Callable[[], Awaitable[object]]:
        return lambda: table.transact([Insert(e) for e in batch])

    await _bounded([insert(b) for b in batches])


async def seed(account: StorageAccount, config: BusConfig, endpoint: str, n: int) -> None:
    long_ago = datetime.now(UTC) - timedelta(days=60)
    tokens = account.blob_container(config.tokens_container)
    table = account.table(endpoint)
    ingress = account.table(config.ingress_table)
    payloads = account.blob_container(config.payloads_container)  # the cleanup lists it
    for store in (tokens, table, ingress, payloads):
        await store.create_if_missing()

    def create(name: str, metadata: dict[str, str]) -> Callable[[], Awaitable[object]]:
        return lambda: tokens.create(name, b"{}", metadata)

    creates: list[Callable[[], Awaitable[object]]] = []
    for i in range(0, n, TOKENS_PER_ROUND):
        # A round that crashed before its O(m) was written: the origin row does not exist.
        incoming, attempt = fresh_id(), fresh_id()
        origin = Origin(endpoint, f"p{i // ROWS_PER_PARTITION}", outbox_row(incoming))
        metadata = {"claim": "", "origin": origin.encode()}
        for _ in range(min(TOKENS_PER_ROUND, n - i)):
            name = token_name(endpoint, incoming, attempt, fresh_id(), b"{}")
            creates.append(create(name, metadata))
    await _bounded(creates)

    outbox, audit, records = [], [], []
    for i in range(n):
        partition = f"p{i // ROWS_PER_PARTITION}"
        message = fresh_id()
        outbox.append(
            OutboxRecord(
                partition_key=partition,
                message_id=message,
                claim=fresh_id(),
                incoming_token=token_name("upstream", message, fresh_id(), fresh_id(), b"{}"),
                started_at=long_ago,
                status="committed",
                committed_at=long_ago,
            ).to_entity()
        )
        audit.append(
            AuditRecord(
                partition_key=partition,
                endpoint=endpoint,
                message_id=message,
                message_type="Bench",
                source="upstream",
                correlation_id=message,
                causation_id=None,
                sent_at=long_ago,
                processed_at=long_ago,
                mode="token",
            ).to_entity()
        )
        records.append(
            Entity(
                f"key-{i}",
                INGRESS_ROW,
                {
                    "sender": "cli",
                    "incoming_id": fresh_id(),
                    "type": "Bench",
                    "created_at": long_ago,
                    "expires_at": long_ago + timedelta(days=7),
                    "outgoing": "[]",
                    "abandoned": "[]",
                },
            )
        )
    await _insert_rows(table, outbox + audit)
    await _insert_rows(ingress, records)


async def one_pass(
    backend: str,
    account: StorageAccount,
    n: int,
    measured: Callable[[], StorageAccount],
    server_pid: int | None = None,
) -> Result:
    suffix = uuid.uuid4().hex[:8]
    endpoint = f"bench{suffix}"
    config = BusConfig(
        tokens_container=f"benchtokens{suffix}",
        ingress_table=f"benchingress{suffix}",
        clock=lambda: time.time() + 5,  # past a zero grace for tokens created just now
    )
    await seed(account, config, endpoint, n)
    times = RequestTimes()
    counted = InstrumentedAccount(TimedAccount(measured(), times))
    settings = CleanupSettings(grace_seconds=0, checkpoint_table=f"benchcleanup{suffix}")
    server_before, client_before = process_cpu_seconds(server_pid), time.process_time()
    started = time.monotonic()
    report = await run_cleanup(
        counted,
        {endpoint: "token"},
        rows={endpoint: TableRows(counted.table(endpoint))},
        config=config,
        settings=settings,
    )
    seconds = time.monotonic() - started
    server_after = process_cpu_seconds(server_pid)
    server_cpu = None
    if server_before is not None and server_after is not None:
        server_cpu = server_after - server_before
    requests = counted.instrumentation.count
    return Result(
        backend=backend,
        n=n,
        seeded=4 * n,
        removed=sum(report.removed().values()),
        seconds=seconds,
        requests=requests,
        complete=report.complete,
        per_task={t.task.split(".")[0]: sum(t.removed.values()) for t in report.tasks},
        skipped={t.task.split(".")[0]: t.skipped for t in report.tasks if t.skipped},
        client_cpu=time.process_time() - client_before,
        server_cpu=server_cpu,
        times=times,
    )


async def memory_pass(n: int, latency: float) -> Result:
    memory = MemoryStorageAccount()
    return await one_pass(
        f"memory+{latency * 1000:g}ms", memory, n, lambda: LatencyAccount(memory, latency)
    )


async def azurite_pass(n: int) -> Result:
    emulator = Azurite()
    with emulator as endpoints:
        settings = StorageSettings(connection_string=endpoints.connection_string)
        pid = None if emulator.process is None else emulator.process.pid
        async with AzureStorageAccount(settings) as account:
            return await one_pass("azurite", account, n, lambda: account, server_pid=pid)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.cleanup.bench", description=__doc__)
    p.add_argument("--n", type=int, nargs="+", default=[5000, 20000])
    p.add_argument(
        "--backend", choices=["memory", "azurite"], nargs="+", default=["memory", "azurite"]
    )
    p.add_argument("--latency-ms", type=float, default=10.0)
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.add_argument("--breakdown", action="store_true", help="also print the requests of each kind")
    args = p.parse_args(argv)
    for n in args.n:
        for backend in args.backend:
            if backend == "memory":
                result = asyncio.run(memory_pass(n, args.latency_ms / 1000))
            else:
                result = asyncio.run(azurite_pass(n))
            print(json.dumps(result.to_dict()) if args.json else result.line(), flush=True)
            if args.breakdown and not args.json:
                print("\n".join(result.times.lines()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
