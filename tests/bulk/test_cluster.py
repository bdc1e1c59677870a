"""The bulk job on a real Spark standalone cluster (a master and two workers from the
pyspark installation, the audit's test set-up): submitted with ``spark-submit`` as a file,
then run again with ``python -m shared.bulk --master``; every row is sent once, found sent
the second time, and processed once.

Slow (the cluster, and a driver and executors per run): run with -m slow."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.stores.azure import AzureStorageAccount
from tests.audit.test_cluster import (  # noqa: F401  (fixture "cluster")
    Cluster,
    spark_home,
    standalone_cluster,
)
from tests.bulk.bus import process_all, states
from tests.bulk.jobs import shots, write_parquet

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.azurite]

REPO = Path(__file__).resolve().parents[2]
ROWS = 200
JOB = ["--type", "FireAt", "--to", "shootingrange", "--key-column", "game_id", "--job", "cl-1"]


def run(command: list[str], connection: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "AzureWebJobsStorage": connection,
        "PYTHONPATH": str(REPO),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    said = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 0, "\n".join(said) or done.stderr[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("bulk send:")]
    out = Path(line.rsplit("out=", 1)[1])
    return dict(json.loads((out / "summary.json").read_text()))


async def test_the_job_under_spark_submit_on_a_standalone_cluster_sends_each_row_once(
    cluster: Cluster,
    account: AzureStorageAccount,
    emulator: AzuriteEndpoints,
    tmp_path: Path,
) -> None:
    source = write_parquet(tmp_path / "shots.parquet", shots(ROWS))
    submit = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--master", cluster.url),
        # The executors run this interpreter, whose environment has the storage SDK.
        *("--conf", f"spark.pyspark.python={sys.executable}"),
        *("--conf", f"spark.pyspark.driver.python={sys.executable}"),
        str(REPO / "shared" / "bulk" / "job.py"),
        *("send", "--input", source, *JOB, "--rows-per-task", "50"),
        *("--out", str(tmp_path / "out"), "--quiet"),
    ]
    first = await asyncio.to_thread(run, submit, emulator.connection_string)

    assert (first["read"], first["sent"], first["rejected"], first["partitions"]) == (
        ROWS,
        ROWS,
        0,
        4,
    )
    module = [sys.executable, "-m", "shared.bulk", "send", "--master", cluster.url]
    again = await asyncio.to_thread(
        run,
        [*module, "--input", source, *JOB, "--out", str(tmp_path / "again"), "--quiet"],
        emulator.connection_string,
    )
    assert (again["sent"], again["deduplicated"]) == (0, ROWS)

    await process_all(account)
    ranges = await states(account, "shootingrange")
    assert {state["shots"] for state in ranges.values()} == {1}
    assert len(ranges) == ROWS
    logs = cluster.executor_logs()
    assert all(logs.values()), logs  # both workers ran executors
    stderr = "".join(p.read_text(errors="replace") for paths in logs.values() for p in paths)
    assert not re.search(r"ModuleNotFoundError|Traceback", stderr), stderr[-3000:]
