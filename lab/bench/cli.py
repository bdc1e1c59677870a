"""``python -m lab.bench`` (``make bench``): start Azurite (and PostgreSQL for the
``token_postgres`` mode, the local Cosmos DB server for ``token_cosmos``), measure every mode
side by side, then the scaling runs; print the tables and write ``bench/results.json``."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from lab.bench.modes import (
    AT_LEAST_ONCE,
    TOKEN,
    BenchMode,
    bench_modes,
    bus_modes,
    select,
    store_modes,
)
from lab.bench.report import (
    detail_lines,
    merged_results,
    mode_table,
    results_document,
    scaling_table,
    token_whole_verdict,
    verdict_line,
    whole_cost_table,
    write_results,
)
from lab.bench.runner import Measurement, Plan, Round, measure_side_by_side
from lab.bench.workload import PAYLOAD_BYTES
from lab.local.azurite import REPO_ROOT, Azurite
from lab.local.cosmos import CosmosServer
from lab.local.postgres import PostgresServer
from shared.bus.state.schema import migrate
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.cosmos.settings import CosmosSettings
from shared.terminal import StageLog


@dataclass(frozen=True)
class Sizes:
    roots: int
    scaling_roots: int


FULL = Sizes(roots=500, scaling_roots=100)
QUICK = Sizes(roots=24, scaling_roots=8)
CONCURRENCIES = (1, 4, 16)
PROCESSES = (1, 2)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def package_version(name: str) -> str:
    """The version of an npm package installed into the repository."""
    package = REPO_ROOT / "node_modules" / name / "package.json"
    if not package.exists():
        return "unknown"
    return str(json.loads(package.read_text()).get("version", "unknown"))


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "azurite": package_version("azurite"),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


async def run_all(
    connection_string: str,
    emulator_pid: int | None,
    modes: list[BenchMode],
    scaling_modes: list[BenchMode],
    sizes: Sizes,
    concurrency: int,
    partitions: int | None,
    rounds: int,
    postgres_url: str | None,
    cosmos: CosmosSettings | None,
) -> tuple[list[Measurement], list[Measurement]]:
    cpu = None if emulator_pid is None else functools.partial(process_cpu_seconds, emulator_pid)
    log = StageLog(sys.stdout)  # one line per round, with the time since the start
    async with AzureStorageAccount(StorageSettings(connection_string)) as raw:

        def progress(mode: BenchMode, result: Round | None, error: str | None) -> None:
            if result is None:
                status = f"FAILED: {error}"
            else:
                handled = sum(h.handled for h in result.hosts)
                status = f"{handled / result.elapsed_s:.1f} msgs/s over {result.roots} roots"
            log(f"{mode.label:<18} {status}")

        async def side_by_side(
            which: list[BenchMode], plan: Plan, rounds: int
        ) -> list[Measurement]:
            return await measure_side_by_side(
                raw,
                which,
                plan,
                rounds=rounds,
                separate_processes=True,
                connection_string=connection_string,
                emulator_cpu=cpu,
                progress=progress,
                postgres_url=postgres_url,
                cosmos_settings=cosmos,
            )

        print(
            f"modes side by side: {sizes.roots} roots ({2 * sizes.roots} messages) per mode, "
            f"in {rounds} interleaved rounds"
        )
        main = await side_by_side(modes, Plan(sizes.roots, concurrency, 1, partitions), rounds)
        scaling: list[Measurement] = []
        for number, (processes, in_flight) in enumerate(
            (p, c) for p in PROCESSES for c in CONCURRENCIES
        ):
            if not scaling_modes:
                break
            print(f"scaling: {in_flight} in flight per queue, {processes} host process(es)")
            # Alternate which mode goes first, as the main rounds do.
            order = scaling_modes if number % 2 == 0 else list(reversed(scaling_modes))
            plan = Plan(sizes.scaling_roots, in_flight, processes, partitions)
            measured = {m.mode: m for m in await side_by_side(order, plan, 1)}
            scaling += [measured[m.label] for m in scaling_modes]
    return main, scaling


def start_postgres(server: PostgresServer, context: dict[str, Any]) -> str:
    """A private server with the bus schema, as ``make demo`` starts one; its URL."""
    print("bench: starting PostgreSQL on a free port (token_postgres)")
    url = server.start()

    async def prepare() -> str:
        connection = await asyncpg.connect(url)
        try:
            await migrate(connection)
            return str(await connection.fetchval("SHOW server_version"))
        finally:
            await connection.close()

    context["machine"]["postgres"] = asyncio.run(prepare())
    return url


def start_cosmos(server: CosmosServer, context: dict[str, Any]) -> CosmosSettings:
    """The local Cosmos DB server, as the tests start it; its account's settings."""
    print("bench: starting the local Cosmos DB server on a free port (token_cosmos)")
    server.start()
    context["machine"]["cosmos_server"] = (
        f"@vercel/cosmosdb-server {package_version('@vercel/cosmosdb-server')}"
    )
    return server.settings()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument("--roots", type=int, help="root messages per mode (2 messages each)")
    parser.add_argument("--scaling-roots", type=int, help="root messages per scaling run")
    parser.add_argument("--concurrency", type=int, default=16, help="messages in flight per queue")
    parser.add_argument("--partitions", type=int, help="state partitions (default: one per root)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved rounds the modes' roots are split into"
    )
    parser.add_argument("--modes", nargs="+", help="bench modes to run (default: all)")
    parser.add_argument(
        "--scaling-modes",
        nargs="*",
        default=[AT_LEAST_ONCE, TOKEN],
        help="modes of the scaling runs (none to skip them)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the modes of the results file that this run does not measure (each "
        "named with its own run under earlier_runs) instead of replacing the file",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write the results (default bench/results.json, or "
        "bench/results-quick.json with --quick so a quick run never replaces the full figures)",
    )
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    out: Path = args.out or REPO_ROOT / (
        "bench/results-quick.json" if args.quick else "bench/results.json"
    )
    sizes = Sizes(args.roots or base.roots, args.scaling_roots or base.scaling_roots)
    every = bench_modes() + store_modes()
    modes = select(every, args.modes) if args.modes else every
    scaling_modes = select(every, args.scaling_modes)
    context: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "bus_modes": list(bus_modes()),
        "settings": {
            "quick": args.quick,
            "roots": sizes.roots,
            "messages_per_mode": 2 * sizes.roots,
            "scaling_roots": sizes.scaling_roots,
            "concurrency": args.concurrency,
            "rounds": args.rounds,
            "partitions": args.partitions or "one per root",
            "payload_bytes": PAYLOAD_BYTES,
            "latency": "enqueue by the sending handler to acknowledgement, forwarded messages",
            "peak_memory": "ru_maxrss of each host process (the highest, for several hosts)",
        },
    }
    print("bench: starting Azurite on free ports")
    emulator = Azurite()
    endpoints = emulator.start()
    server = PostgresServer() if any(m.store == "postgres" for m in modes) else None
    cosmos_server = CosmosServer() if any(m.store == "cosmos" for m in modes) else None
    try:
        postgres_url = None if server is None else start_postgres(server, context)
        cosmos = None if cosmos_server is None else start_cosmos(cosmos_server, context)
        pid = emulator.process.pid if emulator.process is not None else None
        main_runs, scaling = asyncio.run(
            run_all(
                endpoints.connection_string,
                pid,
                modes,
                scaling_modes,
                sizes,
                args.concurrency,
                args.partitions,
                args.rounds,
                postgres_url,
                cosmos,
            )
        )
    finally:
        emulator.stop()
        if server is not None:
            server.stop()
        if cosmos_server is not None:
            cosmos_server.stop()
    context["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print()
    print("\n".join(mode_table(main_runs)))
    print()
    print("\n".join(detail_lines(main_runs)))
    print()
    print("storage requests per handled message, hot path and cleanup; USD per million messages")
    print("\n".join(whole_cost_table(main_runs)))
    print(verdict_line(token_whole_verdict(main_runs)))
    if scaling:
        print()
        print("\n".join(scaling_table(scaling)))
    document = (
        merged_results(json.loads(out.read_text()), main_runs, scaling, context)
        if args.merge and out.exists()
        else results_document(main_runs, scaling, context)
    )
    write_results(out, document)
    ratio = document["ratio_token_vs_at_least_once"]
    print()
    print(
        "bench: token vs at-least-once throughput ratio "
        f"{'-' if ratio is None else f'{ratio:.2f}'}; wrote {out}"
    )
    failed = [m for m in [*main_runs, *scaling] if m.available and m.error is not None]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
