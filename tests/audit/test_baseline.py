"""The bench's two sides must agree: Spark and the single-process baseline on the same
synthetic data find exactly the planted anomalies and the same flow and latencies."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.audit.synthetic import START, SyntheticSpec, expected_counts

pytestmark = pytest.mark.spark


def test_spark_and_the_baseline_agree_on_synthetic_data(spark: Any, tmp_path: Path) -> None:
    from shared.audit.baseline import audit_files
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.file_source import read_files
    from shared.audit.synthetic import write_synthetic

    spec = SyntheticSpec(rows=2000, planted=4)
    write_synthetic(spark, spec, str(tmp_path))
    as_of, lost_after = START + timedelta(days=1), timedelta(minutes=5)

    summary = run_audit(*read_files(spark, str(tmp_path)), AuditOptions(as_of, lost_after))
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
        assert endpoint.p99_ms == pytest.approx(exact["p99_ms"])
        assert endpoint.p50_ms == pytest.approx(exact["p50_ms"])
    assert {(h.endpoint, h.count) for h in summary.histogram} == {
        (endpoint, count) for (endpoint, _), count in baseline.histogram.items()
    }
    assert sum(p.count for p in summary.throughput) == sum(baseline.throughput_per_second.values())
