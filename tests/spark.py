"""The one Spark session of a test process, of the kind each test folder asks for.

The audit's tests run on ``local[2]`` (a job fails on its first failed task), the bulk
tests on ``local[2,4]`` (Spark's own task retries). A process has one active session at a
time, so a module asking for the other kind stops the active one and starts its own: the
folders may then run in any order, as they do when the suite is spread over several
processes. The last session is stopped when the run ends (``tests/conftest.py``).

Under CI a test that needs Spark fails when it cannot start; elsewhere it is skipped with the
reason, as with Azurite."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.conftest import UNDER_CI

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"
"""JVM options for the tests' Spark: their inputs are tiny, so the optimising compiler's
work never pays back, and a parallel collector's threads only compete with the other test
processes for the two cores. Measured on three audit test files run alone: 66 s of CPU
against 99 s, the same wall time (docs/testing.md)."""


def spark_session(master: str, app_name: str, conf: dict[str, str]) -> Any:
    """The active session if it runs on ``master``, else a new one (the other stopped), its
    JVM started with ``QUICK_JVM`` unless ``conf`` names its own options."""
    conf = {"spark.driver.extraJavaOptions": QUICK_JVM, **conf}
    try:
        from pyspark.sql import SparkSession

        from shared.audit.session import get_session

        active = SparkSession.getActiveSession()
        if active is not None and active.sparkContext.master != master:
            active.stop()
        return get_session(master, app_name=app_name, conf=conf)
    except Exception as e:  # ImportError without pyspark, a failure to start without Java
        if UNDER_CI:
            pytest.fail(f"Spark is required under CI and could not start: {e}")
        pytest.skip(f"Spark unavailable (run `make deps`): {e}")


def stop_spark() -> None:
    """Stop the active session, if this process started Spark at all."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
