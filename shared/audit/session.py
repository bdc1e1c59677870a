"""The Spark session the audit runs in: local by default, or whatever ``spark-submit`` set up."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from shared.errors import BusError


class SparkFailure(BusError):
    """Spark could not start, or a Spark job failed (a task, an executor, the cluster)."""


PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the ``shared`` package: Python workers must be able to import it."""

DEFAULT_CONF: dict[str, str] = {
    # Timestamps are UTC everywhere in the bus; the machine's zone must not shift buckets.
    "spark.sql.session.timeZone": "UTC",
}
"""Settings every run needs, local or on a cluster."""

LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # The reconciliation's one big shuffle (every delivery's send and processing, tens of
    # bytes each) in partitions small enough for a task's hash table to hold them without
    # spilling under a 1 GiB heap; adaptive execution merges them again when the data is
    # small. The default 200 would mostly be empty tasks on a few local cores.
    "spark.sql.shuffle.partitions": "16",
    "spark.sql.adaptive.enabled": "true",
    # The throughput collector instead of the JVM's default G1: a local audit is one batch
    # job on a 1 GiB heap, where G1's concurrent work competes with the tasks for the same
    # cores. Measured at 10M audit rows on local[2], quiet machine: 32.7 s against 36.3 s,
    # the same peak memory (docs/audit.md). Starting the JVM is the only moment it can be
    # chosen: a session already running keeps its collector.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
}
"""Defaults for a local master only: under ``spark-submit`` the cluster's own settings (its
spark-defaults, ``--conf``) stay in force. ``conf`` given to ``get_session`` overrides both."""


PYTHON_CONF = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"


def session_conf(master: str | None, conf: dict[str, str] | None = None) -> dict[str, str]:
    """What ``get_session`` sets on a new session for ``master`` (None: spark-submit's).

    A session this process starts, on any master, runs its Python workers with
    ``spark.pyspark.python``: ``PYSPARK_PYTHON`` when set, else this interpreter (its virtual
    environment has the storage SDK), never whatever ``python3`` is first on the executors'
    PATH. ``conf`` overrides it (an archived environment on a real cluster: docs/audit.md).
    """
    local = LOCAL_CONF if master is not None and master.startswith("local") else {}
    python = {} if master is None else {PYTHON_CONF: os.environ.get(PYTHON_ENV, sys.executable)}
    return {**DEFAULT_CONF, **local, **python, **(conf or {})}


def get_session(
    master: str | None = "local[*]",
    app_name: str = "bus-audit",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """The active session if ``spark-submit`` made one, else a new one on ``master``.

    Local runs bind to the loopback address (this machine's host name may not resolve), and
    the package's directory is put on the workers' PYTHONPATH so that mapPartitions functions
    defined in ``shared`` import there."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    settings = session_conf(master, conf)
    if PYTHON_CONF in settings:
        # pyspark tells the executors which Python to run from this variable, read when the
        # context starts; the setting alone is honoured only by spark-submit.
        os.environ[PYTHON_ENV] = settings[PYTHON_CONF]
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:  # the JVM failed to start: no Java, bad master URL, ...
        raise SparkFailure(f"Spark could not start ({master}): {e}") from e
    session.sparkContext.setLogLevel("ERROR")
    return session


def ship_package(session: SparkSession) -> Path:
    """Zip the ``shared`` package and add it to the job, for clusters whose executors do not
    have this repository. Returns the zip's path (kept for the session's lifetime)."""
    folder = Path(tempfile.mkdtemp(prefix="bus-audit-"))
    archive = folder / "shared.zip"
    source = PACKAGE_ROOT / "shared"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*.py")):
            zf.write(path, path.relative_to(PACKAGE_ROOT))
    session.sparkContext.addPyFile(str(archive))
    return archive


def is_local(session: SparkSession) -> bool:
    return (session.sparkContext.master or "").startswith("local")


def remove_shipped(archive: Path) -> None:
    shutil.rmtree(archive.parent, ignore_errors=True)
