"""The audit on a real Spark standalone cluster: a master and two workers started from the
pyspark installation on free ports, the audit run there from an export and straight from
Table Storage on Azurite, checked against the same audit in local mode.

Slow (each run on the cluster starts its own driver and executors): run with -m slow."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.audit.cli import EXIT_OK, main
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.conftest import UNDER_CI, Backend
from tests.spark import QUICK_JVM

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.azurite]

REPO = Path(__file__).resolve().parents[2]
COMPARED = ("verdict", "audit_rows", "ingress_rows", "sent", "processed", "in_flight", "poisoned")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class Cluster:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
        }
        # The workers must not hand the executors this test's Python: the driver tells them.
        self.env.pop("PYSPARK_PYTHON", None)

    def start(self, name: str, *args: str) -> Path:
        log = self.folder / f"{name}.log"
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        with log.open("wb") as out:
            self.processes.append(
                subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
            )
        return log

    def up(self) -> None:
        master_log = self.start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--webui-port", str(free_port())),
        )
        for i in (1, 2):
            work = self.folder / f"worker{i}"
            work.mkdir()
            self.start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                *("--cores", "1", "--memory", "2g", "--host", "127.0.0.1"),
                *("--webui-port", str(free_port()), "--work-dir", str(work)),
            )
        deadline = time.monotonic() + 180
        while master_log.read_text(errors="replace").count("Registering worker") < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"the cluster did not start: {master_log.read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    def executor_logs(self) -> dict[str, list[Path]]:
        """Each worker's executor logs (``work-dir/app-*/<executor>/stderr``)."""
        return {w: sorted((self.folder / w).glob("app-*/*/stderr")) for w in ("worker1", "worker2")}


@pytest.fixture(name="cluster", scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers from the pyspark installation, for the module's tests (the
    bulk job's cluster test uses it too)."""
    started = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        started.up()
    except (OSError, RuntimeError) as e:
        started.stop()
        if UNDER_CI:
            pytest.fail(f"the Spark cluster could not start: {e}")
        pytest.skip(f"the Spark cluster could not start: {e}")
    yield started
    started.stop()


def run_on_cluster(cluster: Cluster, out: Path, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """``python -m shared.audit run`` in a fresh driver process on the cluster."""
    command = [sys.executable, "-m", "shared.audit", "run", "--master", cluster.url, *args]
    quick = " ".join(
        f"--conf spark.{side}.extraJavaOptions='{QUICK_JVM}'" for side in ("driver", "executor")
    )
    done = subprocess.run(
        [*command, "--out", str(out), "--quiet"],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO), "PYSPARK_SUBMIT_ARGS": f"{quick} pyspark-shell"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == EXIT_OK, done.stderr[-4000:]
    return dict(json.loads((out / "summary.json").read_text()))


def compared(summary: dict[str, Any]) -> dict[str, Any]:
    flow = sorted(
        (e["sender"], e["destination"], e["message_type"], e["sent"], e["processed"])
        for e in summary["flow"]
    )
    return {
        **{k: summary[k] for k in COMPARED},
        "invariants": summary["invariants"],
        "flow": flow,
    }


async def test_the_audit_on_a_standalone_cluster_matches_local_mode(
    spark: Any, azurite: Any, cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared.settings import StorageSettings
    from shared.stores.azure import AzureStorageAccount

    account = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    try:
        harness, names = await run_orders(Backend("azurite", account))
    finally:
        await account.close()
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    tables = ["--endpoints", ",".join(names.all), "--ingress-tables", harness.config.ingress_table]
    # This run's records of dropped events: other tests may drop events into the default
    # container of the shared emulator, which would turn the verdict into WARN.
    tables += ["--topics-container", harness.config.topics_container]
    as_of = ["--as-of", "2100-01-01T00:00:00+00:00"]
    export = tmp_path / "export"
    assert await asyncio.to_thread(main, ["export", "--out", str(export), "--quiet", *tables]) == 0
    local_out = tmp_path / "local"
    code = await asyncio.to_thread(
        main, ["run", "--input", str(export), "--out", str(local_out), "--quiet", *as_of]
    )
    assert code == EXIT_OK
    local = json.loads((local_out / "summary.json").read_text())
    assert local["sent"] == local["processed"] == ORDERS * DELIVERIES_PER_ORDER

    env = dict(os.environ)
    from_export = run_on_cluster(cluster, tmp_path / "c1", "--input", str(export), *as_of, env=env)
    # Every table split into tasks (none read by the driver): the executors run the storage
    # SDK, which only the driver's virtual environment has.
    from_tables = run_on_cluster(
        cluster,
        tmp_path / "c2",
        *tables,
        *as_of,
        *("--small-table-rows", "0", "--splits", "2"),
        env=env,
    )

    assert compared(from_export) == compared(local)
    assert compared(from_tables) == compared(local)
    logs = cluster.executor_logs()
    assert all(logs.values()), logs  # both workers ran executors
    stderr = "".join(p.read_text(errors="replace") for paths in logs.values() for p in paths)
    assert not re.search(r"ModuleNotFoundError|Traceback", stderr), stderr[-3000:]
