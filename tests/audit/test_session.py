"""Session settings: local defaults for local masters, the cluster's own under spark-submit."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.spark import QUICK_JVM

pytest.importorskip("pyspark")


def test_local_masters_get_few_shuffle_partitions_and_a_cluster_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shared.audit.session import session_conf

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    local = session_conf("local[2]")
    assert local["spark.sql.shuffle.partitions"] == "16"
    assert local["spark.sql.session.timeZone"] == "UTC"
    assert local["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"

    submitted = session_conf(None)  # spark-submit chose the master and the settings
    assert "spark.sql.shuffle.partitions" not in submitted
    assert "spark.ui.enabled" not in submitted
    assert "spark.driver.extraJavaOptions" not in submitted
    assert submitted["spark.sql.session.timeZone"] == "UTC"

    assert "spark.pyspark.python" not in submitted  # spark-submit's own choice stands
    assert session_conf("yarn") == {**submitted, "spark.pyspark.python": sys.executable}
    overridden = session_conf("local[*]", {"spark.sql.shuffle.partitions": "64"})
    assert overridden["spark.sql.shuffle.partitions"] == "64"


def test_executors_run_this_interpreter_on_any_master_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shared.audit.session import session_conf

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    for master in ("local[2]", "spark://127.0.0.1:7077", "yarn"):
        assert session_conf(master)["spark.pyspark.python"] == sys.executable
    packed = {"spark.pyspark.python": "./environment/bin/python"}
    assert session_conf("yarn", packed)["spark.pyspark.python"] == "./environment/bin/python"
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    assert session_conf("spark://h:7077")["spark.pyspark.python"] == "/opt/python/bin/python3"


def test_a_local_session_starts_its_jvm_with_the_options_asked_for(spark: Any) -> None:
    """The JVM options reach the JVM: the session the audit tests run in (started by
    ``get_session`` on a local master, as the audit's own is) asked for ``QUICK_JVM``
    (``tests.spark`` adds it), and its JVM runs with those flags and the serial collector's
    pair, not the throughput collector's that it would run by default (above)."""
    jvm = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    names = {str(bean.getName()) for bean in jvm.getGarbageCollectorMXBeans()}
    assert names == {"Copy", "MarkSweepCompact"}
    arguments = {str(a) for a in jvm.getRuntimeMXBean().getInputArguments()}
    assert set(QUICK_JVM.split()) <= arguments
