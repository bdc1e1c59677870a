"""Runs the checks of ``shared.audit.checks`` and collects their small results into an
``AuditSummary``. Only aggregates and a bounded sample of offending keys reach the driver, so
its memory does not grow with the number of rows."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, Row, Window
from pyspark.sql import functions as F

from shared.audit import checks
from shared.audit.dropped import Takers, dropped_events
from shared.audit.latency import LatencyBucket, latency_figures
from shared.audit.next_steps import next_steps
from shared.audit.summary import (
    SAMPLE_LIMIT,
    AuditSummary,
    FlowEdge,
    Invariants,
    ThroughputPoint,
    verdict_of,
)
from shared.bus.records import AUDIT_OUTCOMES

Progress = Callable[[str], None]


@dataclass(frozen=True)
class AuditOptions:
    as_of: datetime
    """The moment 'now' for the lost-message threshold (tz-aware)."""
    lost_after: timedelta = timedelta(minutes=5)
    """A delivery unprocessed for longer than this is lost; younger ones are in flight."""
    sample_limit: int = SAMPLE_LIMIT
    takers: Takers | None = None
    """Topic -> the audited app's endpoints that take its events, for the fix of dropped
    events (None: the app is not known)."""

    def __post_init__(self) -> None:
        if self.as_of.tzinfo is None:
            raise ValueError("as_of must carry a time zone")
        if self.lost_after < timedelta(0):
            raise ValueError("lost_after must not be negative")


def _quiet(_: str) -> None:
    pass


class _Stages:
    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.done += 1
        self.progress(f"[{self.done}/{self.total}] {name} ...")
        started = time.perf_counter()
        yield
        elapsed = time.perf_counter() - started
        self.timings[name] = round(elapsed, 3)
        self.progress(f"[{self.done}/{self.total}] {name}: {elapsed:.1f} s")


def _plain(row: Row) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.asDict().items():
        out[key] = value.astimezone(UTC).isoformat() if isinstance(value, datetime) else value
    return out


def run_audit(
    audit: DataFrame,
    ingress: DataFrame,
    options: AuditOptions,
    progress: Progress = _quiet,
    poisoned: DataFrame | None = None,
    dropped: DataFrame | None = None,
) -> AuditSummary:
    """Every check over the given inputs; the verdict is FAIL when an invariant is violated,
    else WARN when ``dropped`` (``shared.audit.schema.DROPPED_SCHEMA``, one small row per
    topic) records events dropped for want of a subscriber, else PASS.
    ``poisoned`` (``shared.audit.schema.POISONED_SCHEMA``) lists the messages waiting in
    poison queues: a delivery an entry verifiably covers (``checks.verify_poisoned``) is
    reported as poisoned, neither lost nor in flight; the other entries are reported as
    unverifiable and change no delivery's verdict."""
    stages = _Stages(progress, 3)
    samples: dict[str, list[dict[str, Any]]] = {}
    limit = options.sample_limit
    cut: dict[str, int] = {}
    if poisoned is not None:
        cut = {
            str(r["queue"]): int(r["unread"])
            for r in poisoned.where(F.col("unread").isNotNull()).collect()
        }
        if poisoned.where(F.col("unread").isNull()).isEmpty():
            poisoned = None
        else:  # small (the reader's cap): kept, as every later job reads it
            poisoned = checks.verify_poisoned(
                checks.sent_deliveries(audit, ingress), poisoned
            ).cache()

    with stages.stage("reconciling sent and processed, checking rows"):
        # One pass over the inputs also checks their rows: an invalid row adds a marked
        # delivery to the shuffle the reconciliation makes anyway (``mark_invalid_rows``),
        # instead of a scan of its own or an observation, whose operator runs row by row
        # outside Spark's generated code (about 4 s of a 25 s pass at 10M rows,
        # docs/audit.md). The same job carries the span of processing times the throughput
        # buckets divide.
        reconciled = checks.reconcile(
            checks.sent_deliveries(audit, ingress, mark_invalid_rows=True),
            audit,
            as_of=options.as_of,
            lost_after=options.lost_after,
            poisoned=poisoned,
        )
        flow_rows = checks.flow_graph(reconciled).collect()
        ingress_rows = ingress.count()
        invalid_count = sum(int(r["invalid_rows"]) for r in flow_rows)
        if invalid_count and limit:
            invalid = checks.invalid_rows(audit, ingress)
            samples["invalid_rows"] = [_plain(r) for r in invalid.limit(limit).collect()]
    bucket_seconds = checks.choose_bucket_seconds(_span_seconds(flow_rows))
    with stages.stage("latency, throughput, edge names, outcomes"):
        digest = checks.latency_digest(audit, bucket_seconds).collect()
    latency, histogram = latency_figures(
        (str(r["endpoint"]), _latency_bucket(r))
        for r in digest
        if not r["traffic"] and r["code"] is not None
    )
    audit_rows = sum(int(r["count"]) for r in digest if not r["traffic"])
    outcomes = dict.fromkeys(AUDIT_OUTCOMES, 0)
    for r in digest:
        if r["traffic"] and r["outcome"] in outcomes:
            outcomes[r["outcome"]] += int(r["count"])
    traffic = [r for r in digest if r["traffic"] and r["edge"] is not None]
    points = _throughput(traffic)
    with stages.stage("naming edges, sampling offenders"):
        sent = checks.sent_deliveries(audit, ingress)
        names = _processed_edge_names(traffic)
        # Only marks of invalid rows make a row that sent and processed nothing: no edge.
        edge_rows = [r for r in flow_rows if r["sent"] or r["processed"]]
        unnamed = [int(r["edge"]) for r in edge_rows if r["edge"] not in names]
        if unnamed:  # edges none of whose deliveries was processed
            names.update(
                (int(r["edge"]), (str(r["sender"]), str(r["message_type"])))
                for r in checks.sent_edge_names(sent, unnamed).collect()
            )
        edges = sorted(
            (_edge(r, names) for r in edge_rows),
            key=lambda e: (e.sender, e.destination, e.message_type),
        )
        totals = {k: sum(getattr(e, k) for e in edges) for k in _COUNTS}
        if limit and (totals["duplicate"] or totals["lost"] or totals["ghost"]):
            # Sampling offenders runs further jobs on the plain frames: an observation
            # reports one run only.
            reconciled = checks.reconcile(
                sent, audit, as_of=options.as_of, lost_after=options.lost_after, poisoned=poisoned
            )
            names_frame = audit.sparkSession.createDataFrame(
                [(edge, sender, kind) for edge, (sender, kind) in names.items()],
                "edge long, sender string, message_type string",
            )
            _collect_samples(audit, checks.named(reconciled, names_frame), totals, limit, samples)
        parked, unverifiable = (
            _poison_queues(poisoned, limit, samples) if poisoned is not None else ({}, {})
        )
        if poisoned is not None:
            poisoned.unpersist()

    invariants = Invariants(
        duplicates=totals["duplicate"],
        lost=totals["lost"],
        ghosts=totals["ghost"],
        invalid_rows=invalid_count,
    )
    drops = dropped_events(dropped.collect() if dropped is not None else [], options.takers)
    summary = AuditSummary(
        verdict=verdict_of(invariants, drops),
        as_of=options.as_of.astimezone(UTC).isoformat(),
        lost_after_seconds=options.lost_after.total_seconds(),
        audit_rows=audit_rows,
        ingress_rows=ingress_rows,
        sent=totals["sent"],
        processed=totals["processed"],
        in_flight=totals["in_flight"],
        poisoned=totals["poisoned"],
        poison_messages=parked,
        unverifiable_poison=sum(unverifiable.values()),
        poison_unverifiable=unverifiable,
        poison_cut=cut,
        dropped=drops,
        invariants=invariants,
        samples=samples,
        latency=latency,
        histogram=histogram,
        throughput_bucket_seconds=bucket_seconds,
        throughput=points,
        flow=edges,
        timings=stages.timings,
        outcomes={o: n for o, n in outcomes.items() if n},
    )
    summary.next_steps = next_steps(summary)
    return summary


def _span_seconds(flow_rows: list[Row]) -> float:
    """From the first processing to the last, over every edge (0 without a processing)."""
    firsts = [r["first_processed_at"] for r in flow_rows if r["first_processed_at"] is not None]
    lasts = [r["last_processed_at"] for r in flow_rows if r["last_processed_at"] is not None]
    return (max(lasts) - min(firsts)).total_seconds() if firsts and lasts else 0.0


def _latency_bucket(row: Row) -> LatencyBucket:
    return LatencyBucket(
        code=int(row["code"]),
        count=int(row["count"]),
        sum_us=int(row["sum_us"]),
        min_us=int(row["min_us"]),
        max_us=int(row["max_us"]),
    )


def _throughput(traffic: list[Row]) -> list[ThroughputPoint]:
    """Processings per throughput bucket and endpoint, from the digest's traffic rows."""
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for r in traffic:
        if r["bucket_start"] is not None:
            counts[(r["bucket_start"], str(r["endpoint"]))] += int(r["count"])
    return [
        ThroughputPoint(start.astimezone(UTC).isoformat(), endpoint, n)
        for (start, endpoint), n in sorted(counts.items())
    ]


def _processed_edge_names(traffic: list[Row]) -> dict[int, tuple[str, str]]:
    """Edge code -> (sender, message type) of every edge the processing rows name."""
    return {int(r["edge"]): (str(r["source"]), str(r["message_type"])) for r in traffic}


def _poison_queues(
    poisoned: DataFrame, limit: int, samples: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Entries per poison queue and, per queue, those that cannot be verified; up to
    ``limit`` of each kind with their reasons (and why the unverifiable ones are)."""
    unverified = F.col("problem").isNotNull()
    per_queue = (
        poisoned.groupBy("queue")
        .agg(F.count(F.lit(1)).alias("count"), F.sum(unverified.cast("long")).alias("bad"))
        .orderBy("queue")
        .collect()
    )
    counts = {str(r["queue"]): int(r["count"]) for r in per_queue}
    bad = {str(r["queue"]): int(r["bad"]) for r in per_queue if r["bad"]}
    if counts and limit:
        first = (
            poisoned.where(~unverified)
            .select("queue", "message_id", "message_type", "reason")
            .orderBy("queue", "message_id")
        )
        verified = [_plain(r) for r in first.limit(limit).collect()]
        if verified:
            samples["poisoned"] = verified
    if bad and limit:
        columns = (
            "queue",
            "claimed_id",
            "message_id",
            "sender",
            "incoming_id",
            "problem",
            "reason",
        )
        first = (
            poisoned.where(unverified).select(*columns).orderBy("queue", "claimed_id", "problem")
        )
        samples["unverifiable_poison"] = [_plain(r) for r in first.limit(limit).collect()]
    return counts, bad


_COUNTS = ("sent", "processed", "duplicate", "lost", "in_flight", "ghost", "poisoned")


def _edge(row: Row, names: dict[int, tuple[str, str]]) -> FlowEdge:
    sender, message_type = names.get(int(row["edge"]), ("?", "?"))
    return FlowEdge(
        sender=sender,
        destination=str(row["destination"]),
        message_type=message_type,
        sent=int(row["sent"] or 0),
        processed=int(row["processed"] or 0),
        duplicate=int(row["duplicate"] or 0),
        lost=int(row["lost"] or 0),
        in_flight=int(row["in_flight"] or 0),
        ghost=int(row["ghost"] or 0),
        poisoned=int(row["poisoned"] or 0),
    )


def _collect_samples(
    audit: DataFrame,
    reconciled: DataFrame,
    totals: dict[str, int],
    limit: int,
    samples: dict[str, list[dict[str, Any]]],
) -> None:
    """Name up to ``limit`` offending deliveries of each kind. Runs only when something is
    wrong, so a clean audit pays for the reconciliation once; a failing one pays one more
    pass, plus a scan of the audit rows of the sampled duplicates for where they were."""
    kinds = F.filter(
        F.array(
            F.when(F.col("duplicate"), F.lit("duplicates")),
            F.when(F.col("lost"), F.lit("lost")),
            F.when(F.col("ghost"), F.lit("ghosts")),
        ),
        lambda kind: kind.isNotNull(),
    )
    rank = F.row_number().over(Window.partitionBy("kind").orderBy("destination", "message_id"))
    offending = (
        reconciled.where(F.col("duplicate") | F.col("lost") | F.col("ghost"))
        .select(
            F.explode(kinds).alias("kind"),
            "destination",
            "message_id",
            "sender",
            "message_type",
            "sent_at",
            "processings",
        )
        .withColumn("rank", rank)
        .where(F.col("rank") <= limit)
        .drop("rank")
        .orderBy("kind", "destination", "message_id")
    )
    for row in offending.collect():
        sample = _plain(row)
        samples.setdefault(sample.pop("kind"), []).append(sample)
    duplicates = samples.get("duplicates", [])
    if duplicates:
        keys = audit.sparkSession.createDataFrame(
            [(d["destination"], d["message_id"]) for d in duplicates],
            "endpoint string, message_id string",
        )
        rows = audit.join(F.broadcast(keys), ["endpoint", "message_id"], "left_semi")
        detail = checks.duplicate_processings(rows).orderBy("endpoint", "message_id")
        samples["duplicates"] = [_plain(r) for r in detail.collect()]
