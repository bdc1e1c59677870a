"""The audit's checks in DuckDB and in Polars: what a user would pick on one machine, so the
bench measures Spark against them rather than against a plain Python loop only.

Both read the same Parquet layout (``audit/``, ``ingress/``) and do the same work as
``shared.audit.compute.run_audit`` without samples: reconcile sent and processed deliveries
by (destination, message id) into the flow graph (sent, processed, duplicates, lost, in
flight, ghosts per edge), count rows, latency count/mean/percentiles/max and the histogram
per endpoint, and throughput per second and endpoint. Dev dependencies (requirements-dev.txt),
imported only here, for the bench.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from shared.audit.checks import HISTOGRAM_STEPS_PER_DOUBLING
from shared.bus.session_records import SESSION_MODE

THREADS = 2
"""As many as Spark's local[2]: the same cores for every engine."""


@dataclass
class AnchorResult:
    audit_rows: int = 0
    sent: int = 0
    processed: int = 0
    duplicates: int = 0
    lost: int = 0
    in_flight: int = 0
    ghosts: int = 0
    p99_ms: dict[str, float] = field(default_factory=dict)
    histogram_buckets: int = 0
    throughput_buckets: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "audit_rows": self.audit_rows,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "ghosts": self.ghosts,
            "sent": self.sent,
            "processed": self.processed,
        }


def _cutoff_us(as_of: datetime, lost_after: timedelta) -> int:
    return int((as_of - lost_after).timestamp() * 1_000_000)


# A session's audit row sends what it caused and is no processing: ``p`` leaves it out.
_DUCKDB_FLOW = """
WITH a AS (SELECT * FROM read_parquet('{audit}')),
p AS (SELECT * FROM a WHERE mode IS DISTINCT FROM '{session}'),
i AS (SELECT * FROM read_parquet('{ingress}')),
sends AS (
    SELECT endpoint AS sender, epoch_us(processed_at) AS sent_us, unnest(caused) AS m FROM a
    UNION ALL
    SELECT sender, epoch_us(created_at), unnest(outgoing) FROM i
),
sides AS (
    SELECT m.destination AS destination, m.id AS message_id, hash(sender, m.type) AS edge,
           1 AS is_send, sent_us FROM sends
    UNION ALL
    SELECT endpoint, message_id, hash(source, message_type), 0, NULL FROM p
),
d AS (
    SELECT destination, message_id, sum(is_send) AS sends, count(*) - sum(is_send) AS done,
           min(sent_us) AS sent_us,
           min(edge) FILTER (WHERE is_send = 1) AS sent_edge,
           min(edge) FILTER (WHERE is_send = 0) AS done_edge
    FROM sides GROUP BY destination, message_id
)
SELECT coalesce(sent_edge, done_edge) AS edge, destination,
       count(*) FILTER (WHERE sends > 0) AS sent,
       count(*) FILTER (WHERE done > 0) AS processed,
       count(*) FILTER (WHERE done > 1) AS duplicate,
       count(*) FILTER (WHERE sends > 0 AND done = 0 AND coalesce(sent_us < {cutoff}, true))
           AS lost,
       count(*) FILTER (WHERE sends > 0 AND done = 0 AND NOT coalesce(sent_us < {cutoff}, true))
           AS in_flight,
       count(*) FILTER (WHERE sends = 0) AS ghost
FROM d GROUP BY ALL
"""

_DUCKDB_LATENCY = """
WITH l AS (
    SELECT endpoint, processed_at,
           (epoch_us(processed_at) - epoch_us(sent_at)) / 1000.0 AS ms
    FROM read_parquet('{audit}')
    WHERE sent_at IS NOT NULL AND processed_at IS NOT NULL AND mode IS DISTINCT FROM '{session}'
)
SELECT endpoint, count(*) AS n, avg(ms) AS mean_ms,
       approx_quantile(ms, [0.5, 0.9, 0.99]) AS ranks, max(ms) AS max_ms,
       min(processed_at) AS first_at, max(processed_at) AS last_at
FROM l GROUP BY endpoint
"""

_DUCKDB_HISTOGRAM = """
SELECT endpoint, floor(log2(greatest((epoch_us(processed_at) - epoch_us(sent_at)) / 1000.0, 1))
       * {steps}) AS bucket, count(*)
FROM read_parquet('{audit}')
WHERE sent_at IS NOT NULL AND processed_at IS NOT NULL AND mode IS DISTINCT FROM '{session}'
GROUP BY ALL
"""

_DUCKDB_THROUGHPUT = """
SELECT endpoint, epoch(processed_at)::BIGINT AS second, count(*)
FROM read_parquet('{audit}')
WHERE processed_at IS NOT NULL AND mode IS DISTINCT FROM '{session}' GROUP BY ALL
"""


def duckdb_audit(path: Path, *, as_of: datetime, lost_after: timedelta) -> AnchorResult:
    import duckdb

    files = {
        "audit": f"{path}/audit/*.parquet",
        "ingress": f"{path}/ingress/*.parquet",
        "session": SESSION_MODE,
    }
    with duckdb.connect(config={"threads": THREADS}) as db:
        flow = db.sql(_DUCKDB_FLOW.format(**files, cutoff=_cutoff_us(as_of, lost_after))).fetchall()
        latency = db.sql(_DUCKDB_LATENCY.format(**files)).fetchall()
        histogram = db.sql(
            _DUCKDB_HISTOGRAM.format(**files, steps=HISTOGRAM_STEPS_PER_DOUBLING)
        ).fetchall()
        throughput = db.sql(_DUCKDB_THROUGHPUT.format(**files)).fetchall()
        [(counted,)] = db.sql(f"SELECT count(*) FROM read_parquet('{files['audit']}')").fetchall()
    return AnchorResult(
        audit_rows=int(counted),
        sent=sum(int(r[2]) for r in flow),
        processed=sum(int(r[3]) for r in flow),
        duplicates=sum(int(r[4]) for r in flow),
        lost=sum(int(r[5]) for r in flow),
        in_flight=sum(int(r[6]) for r in flow),
        ghosts=sum(int(r[7]) for r in flow),
        p99_ms={str(r[0]): round(float(r[3][2]), 1) for r in sorted(latency)},
        histogram_buckets=len(histogram),
        throughput_buckets=len(throughput),
    )


def polars_audit(path: Path, *, as_of: datetime, lost_after: timedelta) -> AnchorResult:
    # Read when polars is first imported (the bench's child process imports it here).
    os.environ.setdefault("POLARS_MAX_THREADS", str(THREADS))
    import polars as pl

    audit = pl.scan_parquet(f"{path}/audit/*.parquet")
    ingress = pl.scan_parquet(f"{path}/ingress/*.parquet")

    def us(column: str) -> Any:
        return pl.col(column).dt.epoch("us")

    def sends(frame: Any, sender: str, at: str, deliveries: str) -> Any:
        return (
            frame.select(pl.col(sender).alias("sender"), us(at).alias("sent_us"), deliveries)
            .explode(deliveries)
            .drop_nulls(deliveries)
            .select(
                pl.col(deliveries).struct.field("destination"),
                pl.col(deliveries).struct.field("id").alias("message_id"),
                pl.struct(pl.col("sender"), pl.col(deliveries).struct.field("type"))
                .hash()
                .alias("edge"),
                pl.lit(1, pl.Int64).alias("is_send"),
                "sent_us",
            )
        )

    # A session's audit row sends what it caused and is no processing.
    processings = audit.filter(pl.col("mode").ne_missing(SESSION_MODE))
    processed = processings.select(
        pl.col("endpoint").alias("destination"),
        "message_id",
        pl.struct("source", "message_type").hash().alias("edge"),
        pl.lit(0, pl.Int64).alias("is_send"),
        pl.lit(None, pl.Int64).alias("sent_us"),
    )
    sides = pl.concat(
        [
            sends(audit, "endpoint", "processed_at", "caused"),
            sends(ingress, "sender", "created_at", "outgoing"),
            processed,
        ]
    )
    is_send = pl.col("is_send") == 1
    per_delivery = sides.group_by("destination", "message_id").agg(
        pl.col("is_send").sum().alias("sends"),
        (pl.len() - pl.col("is_send").sum()).alias("done"),
        pl.col("sent_us").min(),
        pl.col("edge").filter(is_send).min().alias("sent_edge"),
        pl.col("edge").filter(~is_send).min().alias("done_edge"),
    )
    unprocessed = (pl.col("sends") > 0) & (pl.col("done") == 0)
    overdue = (pl.col("sent_us") < _cutoff_us(as_of, lost_after)).fill_null(True)
    flow = (
        per_delivery.group_by(pl.coalesce("sent_edge", "done_edge").alias("edge"), "destination")
        .agg(
            (pl.col("sends") > 0).sum().alias("sent"),
            (pl.col("done") > 0).sum().alias("processed"),
            (pl.col("done") > 1).sum().alias("duplicate"),
            (unprocessed & overdue).sum().alias("lost"),
            (unprocessed & ~overdue).sum().alias("in_flight"),
            (pl.col("sends") == 0).sum().alias("ghost"),
        )
        .collect(engine="streaming")
    )
    timed = processings.filter(
        pl.col("sent_at").is_not_null() & pl.col("processed_at").is_not_null()
    )
    ms = ((us("processed_at") - us("sent_at")) / 1000.0).alias("ms")
    latency = (
        timed.select("endpoint", ms)
        .group_by("endpoint")
        .agg(
            pl.len().alias("n"),
            pl.col("ms").mean().alias("mean_ms"),
            pl.col("ms").quantile(0.5, "nearest").alias("p50"),
            pl.col("ms").quantile(0.9, "nearest").alias("p90"),
            pl.col("ms").quantile(0.99, "nearest").alias("p99"),
            pl.col("ms").max().alias("max_ms"),
        )
        .collect(engine="streaming")
    )
    bucket = (ms.clip(lower_bound=1.0).log(2) * HISTOGRAM_STEPS_PER_DOUBLING).floor()
    histogram = timed.group_by("endpoint", bucket.alias("bucket")).len().collect(engine="streaming")
    throughput = (
        processings.filter(pl.col("processed_at").is_not_null())
        .group_by("endpoint", pl.col("processed_at").dt.epoch("s").alias("second"))
        .len()
        .collect(engine="streaming")
    )
    totals = flow.sum()
    rows = audit.select(pl.len()).collect()
    return AnchorResult(
        audit_rows=int(rows.item()),
        sent=int(totals["sent"][0]),
        processed=int(totals["processed"][0]),
        duplicates=int(totals["duplicate"][0]),
        lost=int(totals["lost"][0]),
        in_flight=int(totals["in_flight"][0]),
        ghosts=int(totals["ghost"][0]),
        p99_ms={
            str(r["endpoint"]): round(float(r["p99"]), 1)
            for r in latency.sort("endpoint").iter_rows(named=True)
        },
        histogram_buckets=histogram.height,
        throughput_buckets=throughput.height,
    )
