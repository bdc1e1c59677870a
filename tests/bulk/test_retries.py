"""Exactly once per row under Spark's own retries: the Python workers are killed while
their tasks are mid-partition, Spark retries those tasks, then the whole job is run again;
the audit (``shared.audit``) then shows every row's message processed exactly once and
nothing else sent, and the endpoints' state shows each row applied once."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.bulk.job import run_send
from shared.bulk.summary import BulkSummary
from shared.resources import TABLES
from shared.sample.app import app as sample_app
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bulk.bus import process_all, states
from tests.bulk.jobs import FIRE_AT, job_options, shots, write_parquet
from tests.bulk.workers import kill, python_workers

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

ROWS = 120
PER_TASK = 30


async def kill_workers_mid_partition(
    account: AzureStorageAccount, job: asyncio.Future[BulkSummary]
) -> tuple[int, list[int]]:
    """Once a few rows are sent and no task can have finished its partition, kill every
    Python worker; returns the rows sent by then and the workers killed."""
    queue = account.queue("shootingrange")
    deadline = time.monotonic() + 120
    while not job.done() and time.monotonic() < deadline:
        sent = await queue.approximate_count()
        if sent >= 6:
            workers = python_workers()
            kill(workers)
            return sent, workers
        await asyncio.sleep(0.02)
    raise AssertionError("the job ended before its workers could be killed")


async def test_workers_killed_mid_partition_then_a_rerun_process_each_row_once(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    source = write_parquet(tmp_path / "shots.parquet", shots(ROWS))
    options = job_options(storage, tmp_path, "killed-1", source)
    send = replace(FIRE_AT, concurrency=2, rows_per_task=PER_TASK)  # slow enough to cut

    job = asyncio.ensure_future(asyncio.to_thread(run_send, options, send, spark))
    sent_before, killed = await kill_workers_mid_partition(account, job)
    first = await job

    assert killed
    assert sent_before < PER_TASK
    assert (first.read, first.rejected) == (ROWS, 0)
    assert first.sent + first.deduplicated == ROWS
    # The retried tasks found the rows their killed attempts had sent, and sent them no more.
    assert first.deduplicated >= 1

    again = await asyncio.to_thread(run_send, options, send, spark)

    assert (again.sent, again.deduplicated, again.rejected) == (0, ROWS, 0)
    await process_all(account)
    summary = await asyncio.to_thread(audit, spark, storage)
    assert summary.verdict == "PASS"
    assert summary.ingress_rows == ROWS  # one ingress record per row, nothing else sent
    assert summary.sent == summary.processed == 2 * ROWS  # FireAt, then Hit or Missed
    invariants = summary.invariants
    assert (invariants.duplicates, invariants.lost, invariants.ghosts) == (0, 0, 0)
    edges: dict[tuple[str, str], int] = {}
    for edge in summary.flow:
        pair = (edge.sender, edge.destination)
        edges[pair] = edges.get(pair, 0) + edge.processed
    assert edges == {("bulk", "shootingrange"): ROWS, ("shootingrange", "leaderboard"): ROWS}
    ranges = await states(account, "shootingrange")
    assert sorted(ranges) == [row["game_id"] for row in shots(ROWS)]
    assert {state["shots"] for state in ranges.values()} == {1}


def audit(spark: Any, storage: StorageSettings) -> Any:
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.table_source import read_tables

    audit_rows, ingress_rows = read_tables(
        spark,
        storage,
        endpoint_tables=list(sample_app.endpoints),
        ingress_tables=[TABLES["ingress"]],
    )
    as_of = datetime.now(UTC) + timedelta(hours=1)  # every unprocessed message is overdue
    return run_audit(audit_rows, ingress_rows, AuditOptions(as_of=as_of))
