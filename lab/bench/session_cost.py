"""``python -m lab.bench.session_cost`` (``make session-bench``): what one web request that
writes one row and sends one message pays, three ways, side by side in one run on one Azurite
and one local PostgreSQL server, on Table Storage and on PostgreSQL:

- ``session``: ``bus.session`` (``shared.bus.session``): the row and the message commit
  together; on PostgreSQL the row goes to the user's own table on the user's own connection;
- ``write + ingress``: the row written on its own, then the ingress client's send under a key
  (deduplicated, not atomic: a crash between them loses the message or sends it for a row
  that was never written);
- ``write + raw send``: the row written, then one queue message (neither atomic nor
  deduplicated; no bus receiver could even process it: the floor of any send).

For each it prints the requests per web request, by kind (blob, queue and table requests
counted by a wrapper around the storage account; the bus's SQL operations counted by the
same wrapper around its database, each one statement or one transaction; the user's own
statements counted by the bench: its INSERT, and the session's BEGIN and COMMIT on the
user's connection), and the latency per request in milliseconds (median and 95th
percentile). The requests of the six runs are interleaved one by one, so the machine's load
weighs on each alike; compare the rows of one run, never absolute times across runs
(docs/benchmarks.md), and read the load average printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from lab.local.azurite import Azurite
from lab.local.postgres import PostgresServer
from shared.bus import Bus, BusApp, BusConfig, Command, HandlerContext
from shared.bus.app import Endpoint, NoState
from shared.bus.state.connection import PostgresSettings
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.stores import PostgresDatabase
from shared.provisioning import provision
from shared.resources import resources_of
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import Instrumentation, InstrumentedAccount
from shared.stores.table import Entity

USER_TABLE = "bench_orders"


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str


def bench_app() -> BusApp:
    app = BusApp()
    app.endpoint("benchweb", sessions=True)
    app.endpoint("benchwebpg", store="postgres", sessions=True)
    orders: Endpoint[NoState] = app.endpoint(
        "benchorders"
    )  # no worker runs: only the sends are measured

    @orders.handles(PlaceOrder)
    def take(ctx: HandlerContext[NoState], order: PlaceOrder) -> None:
        """Never run here."""

    return app


@dataclass
class Run:
    """One way of handling the request, on one store, and what its requests cost."""

    name: str
    store: str
    request: Callable[[str], Awaitable[int]]
    """Handles the request for one order id; returns the user's own SQL statements."""
    kinds: Counter[str] = field(default_factory=Counter)
    millis: list[float] = field(default_factory=list)


@dataclass
class Bench:
    bus: Bus
    instrumentation: Instrumentation
    connection: asyncpg.Connection

    async def session_table(self, order: str) -> int:
        async with self.bus.session("benchweb", partition=order, key=order) as s:
            s.insert(Entity(order, "order", {"amount": 5}))
            s.send(PlaceOrder(order_id=order), to="benchorders")
        return 0

    async def session_sql(self, order: str) -> int:
        async with self.bus.session(
            "benchwebpg", partition=order, key=order, connection=self.connection
        ) as s:
            await self.connection.execute(f"INSERT INTO {USER_TABLE} VALUES ($1, 5)", order)
            s.send(PlaceOrder(order_id=order), to="benchorders")
        return 3  # BEGIN, the INSERT and COMMIT on the user's connection

    async def write_table(self, order: str) -> None:
        await self.bus.account.table("benchweb").insert(Entity(order, "order", {"amount": 5}))

    async def write_sql(self, order: str) -> None:
        await self.connection.execute(f"INSERT INTO {USER_TABLE} VALUES ($1, 5)", order)

    async def ingress(self, order: str) -> None:
        client = self.bus.client("benchweb")
        await client.send(PlaceOrder(order_id=order), to="benchorders", idempotency_key=order)

    async def raw_send(self, order: str) -> None:
        await self.bus.account.queue("benchorders").send(f'{{"order_id": "{order}"}}')

    def runs(self) -> list[Run]:
        async def table_ingress(order: str) -> int:
            await self.write_table(order)
            await self.ingress(order)
            return 0

        async def table_raw(order: str) -> int:
            await self.write_table(order)
            await self.raw_send(order)
            return 0

        async def sql_ingress(order: str) -> int:
            await self.write_sql(order)
            await self.ingress(order)
            return 1

        async def sql_raw(order: str) -> int:
            await self.write_sql(order)
            await self.raw_send(order)
            return 1

        return [
            Run("session", "table", self.session_table),
            Run("write + ingress", "table", table_ingress),
            Run("write + raw send", "table", table_raw),
            Run("session", "postgres", self.session_sql),
            Run("write + ingress", "postgres", sql_ingress),
            Run("write + raw send", "postgres", sql_raw),
        ]


async def measure(
    runs: list[Run], instrumentation: Instrumentation, requests: int, label: str
) -> None:
    """Each run's requests, interleaved one by one across the runs."""
    for n in range(requests):
        for index, run in enumerate(runs):
            order = f"{label}{index}-{n:06d}"
            mark = instrumentation.count
            started = time.perf_counter()
            own = await run.request(order)
            run.millis.append((time.perf_counter() - started) * 1000)
            run.kinds.update(instrumentation.kinds_since(mark))
            if own:
                run.kinds["sql.user statement"] += own


def show(runs: list[Run], requests: int) -> str:
    lines = [
        f"{'way':<18} {'store':<9} {'requests':>8} {'p50 ms':>7} {'p95 ms':>7}  by kind",
    ]
    for run in runs:
        total = sum(run.kinds.values()) / requests
        p50 = statistics.median(run.millis)
        p95 = statistics.quantiles(run.millis, n=20)[-1]
        kinds = ", ".join(f"{k} {v / requests:g}" for k, v in sorted(run.kinds.items()))
        lines.append(
            f"{run.name:<18} {run.store:<9} {total:>8.2f} {p50:>7.1f} {p95:>7.1f}  {kinds}"
        )
    return "\n".join(lines)


async def bench(connection_string: str, url: str, requests: int, warmup: int) -> list[Run]:
    instrumentation = Instrumentation()
    azure = AzureStorageAccount(StorageSettings(connection_string=connection_string))
    database = PostgresDatabase(PostgresSettings(url=url))
    app = bench_app()
    config = BusConfig()
    try:
        await provision(azure, resources_of(config, tuple(app.endpoints)))
        await database.migrate(["benchwebpg"])
        account = InstrumentedAccount(azure, instrumentation)
        bus = Bus(app, account, config, sql=InstrumentedSql(database, instrumentation))
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(
                f"CREATE TABLE IF NOT EXISTS {USER_TABLE} (order_id text PRIMARY KEY, amount int)"
            )
            runs = Bench(bus, instrumentation, connection).runs()
            warming = Bench(bus, instrumentation, connection).runs()
            run_id = uuid.uuid4().hex[:8]  # fresh orders, whatever earlier runs left
            await measure(warming, instrumentation, warmup, f"warm{run_id}-")
            await measure(runs, instrumentation, requests, f"order{run_id}-")
        finally:
            await connection.close()
    finally:
        await database.close()
        await azure.close()
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.session_cost", description=__doc__)
    parser.add_argument("--requests", type=int, default=200, help="web requests per way")
    parser.add_argument("--warmup", type=int, default=10, help="requests per way not measured")
    args = parser.parse_args(argv)
    with Azurite() as endpoints, PostgresServer() as url:
        runs = asyncio.run(bench(endpoints.connection_string, url, args.requests, args.warmup))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(show(runs, args.requests))
    print(f"({args.requests} requests each, interleaved; load average {load})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
