"""The bench's two sides must agree: Spark and the single-process baseline on the same
synthetic data find exactly the planted anomalies and the same flow and latencies."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lab.audit.synthetic import START, SyntheticSpec, expected_counts

pytestmark = pytest.mark.spark


SPEC = SyntheticSpec(rows=2000, planted=4)


@pytest.fixture(scope="module")
def synthetic(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One synthetic data set for every engine's test (writing it takes Spark seconds)."""
    from lab.audit.synthetic import write_synthetic

    folder = tmp_path_factory.mktemp("synthetic")
    write_synthetic(spark, SPEC, str(folder))
    return folder


def test_spark_and_the_baseline_agree_on_synthetic_data(spark: Any, synthetic: Path) -> None:
    from lab.audit.baseline import audit_files
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.file_source import read_files

    spec, tmp_path = SPEC, synthetic
    as_of, lost_after = START + timedelta(days=1), timedelta(minutes=5)

    audit_df, ingress_df, poisoned = read_files(spark, str(tmp_path))
    summary = run_audit(audit_df, ingress_df, AuditOptions(as_of, lost_after), poisoned=poisoned)
    baseline = audit_files(tmp_path, as_of=as_of, lost_after=lost_after)

    expected = expected_counts(spec)
    inv = summary.invariants
    assert (summary.audit_rows, inv.duplicates, inv.lost, inv.ghosts) == (
        expected["audit_rows"],
        expected["duplicates"],
        expected["lost"],
        expected["ghosts"],
    )
    assert (baseline.audit_rows, baseline.duplicates, baseline.lost, baseline.ghosts) == (
        expected["audit_rows"],
        expected["duplicates"],
        expected["lost"],
        expected["ghosts"],
    )
    assert (baseline.sent, baseline.processed) == (summary.sent, summary.processed)
    assert {
        (e.sender, e.destination, e.message_type): (e.sent, e.processed, e.lost, e.ghost)
        for e in summary.flow
    } == {k: (v["sent"], v["processed"], v["lost"], v["ghost"]) for k, v in baseline.flow.items()}
    for endpoint in summary.latency:
        exact = baseline.latency[endpoint.endpoint]
        assert endpoint.count == exact["count"]
        assert endpoint.max_ms == pytest.approx(exact["max_ms"])
        # Spark's percentiles are the middle of a fine bucket: within 0.14% (1 ms and up).
        assert endpoint.p99_ms == pytest.approx(exact["p99_ms"], rel=0.0014)
        assert endpoint.p50_ms == pytest.approx(exact["p50_ms"], rel=0.0014)
    assert {(h.endpoint, h.count) for h in summary.histogram} == {
        (endpoint, count) for (endpoint, _), count in baseline.histogram.items()
    }
    assert sum(p.count for p in summary.throughput) == sum(baseline.throughput_per_second.values())


@pytest.mark.parametrize("engine", ["duckdb", "polars"])
def test_the_bench_anchors_find_what_spark_finds(spark: Any, synthetic: Path, engine: str) -> None:
    pytest.importorskip(engine)
    from lab.audit import anchors
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.file_source import read_files

    spec, tmp_path = SPEC, synthetic
    as_of, lost_after = START + timedelta(days=1), timedelta(minutes=5)
    audit = anchors.duckdb_audit if engine == "duckdb" else anchors.polars_audit

    audit_df, ingress_df, poisoned = read_files(spark, str(tmp_path))
    summary = run_audit(audit_df, ingress_df, AuditOptions(as_of, lost_after), poisoned=poisoned)
    found = audit(tmp_path, as_of=as_of, lost_after=lost_after)

    assert found.counts() == {
        "audit_rows": summary.audit_rows,
        "duplicates": summary.invariants.duplicates,
        "lost": summary.invariants.lost,
        "ghosts": summary.invariants.ghosts,
        "sent": summary.sent,
        "processed": summary.processed,
    }
    assert found.counts()["duplicates"] == expected_counts(spec)["duplicates"]
    assert found.in_flight == summary.in_flight
    assert found.histogram_buckets == len(summary.histogram)
    assert {e.endpoint: e.p99_ms for e in summary.latency} == pytest.approx(found.p99_ms, rel=0.01)
