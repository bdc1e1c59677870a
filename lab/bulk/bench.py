"""``make bulk-bench``: how fast a bulk send goes on Azurite, and what it costs per row.

For each N it writes N rows (one ``FireAt`` of the sample app per row, one game each) to a
Parquet file, starts a fresh Azurite, provisions the sample app, and runs the bulk job on
``local[2]`` (with Spark's task retries: ``local[2,4]``) as ``python -m shared.bulk send``
runs it; then, with ``--rerun``, the same job again (every row found sent). It prints rows per
second of the sending Spark job, the storage requests per row its tasks made, and the whole
run's time. Figures, not a timed test: Azurite's own CPU shares the machine with Spark.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lab.local.azurite import Azurite
from shared.app_loader import DEFAULT_APP
from shared.bulk.job import JobOptions, SendOptions, run_send
from shared.bulk.summary import BulkSummary
from shared.bus import Bus
from shared.provisioning import provision
from shared.resources import resources_for
from shared.runtime import bus_config
from shared.sample.app import app as sample_app
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount

MASTER = "local[2,4]"
SEND = SendOptions(type_name="FireAt", key_column="game_id", to="shootingrange")


def write_rows(path: Path, count: int) -> str:
    games = [f"game-{i:07d}" for i in range(count)]
    table = pa.table({"game_id": games, "position": [i % 10 for i in range(count)]})
    pq.write_table(table, path)
    return str(path)


async def provision_sample(storage: StorageSettings) -> None:
    async with AzureStorageAccount(storage) as account:
        await provision(account, resources_for(sample_app.endpoints))
        await Bus(sample_app, account, bus_config()).subscribe_all()


def bench(count: int, folder: Path, *, rerun: bool, concurrency: int) -> list[BulkSummary]:
    emulator = Azurite(location=str(folder / f"azurite-{count}"))
    endpoints = emulator.start()
    try:
        storage = StorageSettings(connection_string=endpoints.connection_string)
        asyncio.run(provision_sample(storage))
        options = JobOptions(
            job=f"bench-{count}",
            input_path=write_rows(folder / f"rows-{count}.parquet", count),
            file_format="parquet",
            out=str(folder / f"out-{count}"),
            storage=storage,
            app_reference=DEFAULT_APP,
            master=MASTER,
            quiet=True,
        )
        send = SendOptions(SEND.type_name, SEND.key_column, SEND.to, concurrency=concurrency)
        runs = [run_send(options, send)]
        if rerun:
            runs.append(run_send(options, send))
        return runs
    finally:
        emulator.stop()


def line(label: str, summary: BulkSummary) -> str:
    per_row = summary.requests / summary.read if summary.read else 0.0
    return (
        f"bulk-bench {label}: rows={summary.read} sent={summary.sent} "
        f"deduplicated={summary.deduplicated} partitions={summary.partitions} "
        f"send_seconds={summary.send_seconds:.1f} rows_per_second={summary.rows_per_second:.0f} "
        f"requests_per_row={per_row:.2f} run_seconds={summary.seconds:.1f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bulk.bench", description=__doc__)
    p.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--rerun", action="store_true", help="run each job a second time")
    p.add_argument("--concurrency", type=int, default=SEND.concurrency)
    p.add_argument("--json", action="store_true", help="each summary as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bulk-bench-") as folder:
        for count in args.rows:
            runs = bench(count, Path(folder), rerun=args.rerun, concurrency=args.concurrency)
            for label, summary in zip(("first run", "run again"), runs, strict=False):
                print(summary.to_json() if args.json else line(label, summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
