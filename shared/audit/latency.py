"""Latency figures read from the fine buckets Spark counts (``checks.latency_digest``): per
endpoint the count, mean, percentiles and maximum, and the histogram. The digest holds a few
thousand rows per endpoint whatever the number of processings, so this runs on the driver."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shared.audit.checks import bucket_bounds, histogram_bucket_of
from shared.audit.summary import EndpointLatency, HistogramBucket

PERCENTILES = (0.5, 0.9, 0.99)
"""The percentiles the summary holds: p50, p90 and p99."""


@dataclass(frozen=True)
class LatencyBucket:
    """The latencies of one endpoint that fell in one fine bucket, in microseconds."""

    code: int
    count: int
    sum_us: int
    min_us: int
    max_us: int


def nearest_rank_us(buckets: Sequence[LatencyBucket], p: float) -> float:
    """The ``p`` percentile by nearest rank (the smallest latency with at least a fraction
    ``p`` of them at or below it) of the latencies in ``buckets`` (sorted by code), as the
    middle of the smallest and largest latency of the bucket holding that rank: exact when the
    bucket holds one distinct latency, else within half the bucket's width of it."""
    if not 0 < p <= 1:
        raise ValueError(f"a percentile is a fraction in (0, 1], not {p}")
    total = sum(b.count for b in buckets)
    if total == 0:
        raise ValueError("no latencies")
    rank = max(1, math.ceil(p * total))
    seen = 0
    for bucket in buckets:
        seen += bucket.count
        if seen >= rank:
            return (bucket.min_us + bucket.max_us) / 2
    raise AssertionError("unreachable: the ranks end at the total")


def endpoint_latency(endpoint: str, buckets: Iterable[LatencyBucket]) -> EndpointLatency:
    """The summary's latency row of one endpoint."""
    ordered = sorted(buckets, key=lambda b: b.code)
    count = sum(b.count for b in ordered)
    p50, p90, p99 = (nearest_rank_us(ordered, p) / 1000 for p in PERCENTILES)
    return EndpointLatency(
        endpoint=endpoint,
        count=count,
        mean_ms=sum(b.sum_us for b in ordered) / count / 1000,
        p50_ms=p50,
        p90_ms=p90,
        p99_ms=p99,
        max_ms=max(b.max_us for b in ordered) / 1000,
    )


def latency_figures(
    buckets: Iterable[tuple[str, LatencyBucket]],
) -> tuple[list[EndpointLatency], list[HistogramBucket]]:
    """Per endpoint (sorted) its latency row, and the histogram's buckets, from every
    ``(endpoint, bucket)`` of the digest."""
    by_endpoint: dict[str, list[LatencyBucket]] = defaultdict(list)
    histogram: dict[tuple[str, int], int] = defaultdict(int)
    for endpoint, bucket in buckets:
        by_endpoint[endpoint].append(bucket)
        histogram[(endpoint, histogram_bucket_of(bucket.code))] += bucket.count
    latency = [endpoint_latency(e, by_endpoint[e]) for e in sorted(by_endpoint)]
    return latency, [
        HistogramBucket(endpoint, *bucket_bounds(bucket), n)
        for (endpoint, bucket), n in sorted(histogram.items())
    ]
