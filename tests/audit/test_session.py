"""Session settings: local defaults for local masters, the cluster's own under spark-submit."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")


def test_local_masters_get_few_shuffle_partitions_and_a_cluster_keeps_its_own() -> None:
    from shared.audit.session import session_conf

    local = session_conf("local[2]")
    assert local["spark.sql.shuffle.partitions"] == "16"
    assert local["spark.sql.session.timeZone"] == "UTC"

    submitted = session_conf(None)  # spark-submit chose the master and the settings
    assert "spark.sql.shuffle.partitions" not in submitted
    assert "spark.ui.enabled" not in submitted
    assert submitted["spark.sql.session.timeZone"] == "UTC"

    assert session_conf("yarn") == submitted
    overridden = session_conf("local[*]", {"spark.sql.shuffle.partitions": "64"})
    assert overridden["spark.sql.shuffle.partitions"] == "64"
