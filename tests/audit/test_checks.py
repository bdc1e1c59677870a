"""The audit's checks on small hand-made inputs with planted duplicates, losses and ghosts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.audit.conftest import at, audit, ingress, utc

pytestmark = pytest.mark.spark

ORDERS_SENDS = (
    ("m2", "ChargeCard", "payments"),
    ("m3a", "OrderPlaced", "loyalty"),
    ("m3b", "OrderPlaced", "shipping"),
)


def clean_flow() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """A client order through orders -> payments -> shipping, with OrderPlaced published to
    loyalty and shipping (one message id per subscriber)."""
    rows = [
        audit("orders", "m1", message_type="PlaceOrder", processed=1.0, sends=ORDERS_SENDS),
        audit(
            "payments",
            "m2",
            source="orders",
            message_type="ChargeCard",
            sent=1.0,
            processed=1.5,
            sends=(("m4", "ShipOrder", "shipping"),),
        ),
        audit("loyalty", "m3a", source="orders", message_type="OrderPlaced", sent=1, processed=2),
        audit("shipping", "m3b", source="orders", message_type="OrderPlaced", sent=1, processed=3),
        audit("shipping", "m4", source="payments", message_type="ShipOrder", sent=1.5, processed=4),
    ]
    return rows, [ingress("order-1", ("m1", "PlaceOrder", "orders"))]


def frames(spark: Any, rows: list[tuple[object, ...]], sends: list[tuple[object, ...]]) -> Any:
    from shared.audit.schema import AUDIT_SCHEMA, INGRESS_SCHEMA

    return spark.createDataFrame(rows, AUDIT_SCHEMA), spark.createDataFrame(sends, INGRESS_SCHEMA)


def verdicts(
    spark: Any, rows: Any, sends: Any, as_of_seconds: float = 3600.0
) -> dict[tuple[str, str], Any]:
    """{(destination, message_id): row} of the reconciliation, with sender and type named."""
    from pyspark.sql import functions as F

    from shared.audit import checks

    audit_df, ingress_df = frames(spark, rows, sends)
    sent = checks.sent_deliveries(audit_df, ingress_df)
    reconciled = checks.reconcile(
        sent, audit_df, as_of=at(as_of_seconds), lost_after=timedelta(minutes=5)
    )
    names = (
        checks.processing_rows(audit_df)
        .select(
            checks.edge_code(F.col("source"), F.col("message_type")).alias("edge"),
            F.col("source").alias("sender"),
            "message_type",
        )
        .unionByName(
            sent.select(
                checks.edge_code(F.col("sender"), F.col("message_type")).alias("edge"),
                "sender",
                "message_type",
            )
        )
        .distinct()
    )
    return {
        (r["destination"], r["message_id"]): r.asDict()
        for r in checks.named(reconciled, names).collect()
    }


def flagged(result: dict[tuple[str, str], Any], flag: str) -> set[tuple[str, str]]:
    return {key for key, row in result.items() if row[flag]}


def test_a_clean_flow_has_no_violations(spark: Any) -> None:
    rows, sends = clean_flow()

    result = verdicts(spark, rows, sends)

    assert len(result) == 5
    for flag in ("duplicate", "lost", "ghost", "in_flight"):
        assert flagged(result, flag) == set(), flag
    assert all(row["processings"] == 1 for row in result.values())
    assert result[("orders", "m1")]["sender"] == "client"
    assert result[("shipping", "m4")]["sender"] == "payments"


def test_sent_deliveries_come_from_clients_and_from_handlers(spark: Any) -> None:
    from shared.audit import checks

    rows, sends = clean_flow()
    audit_df, ingress_df = frames(spark, rows, sends)

    sent = checks.sent_deliveries(audit_df, ingress_df).collect()

    assert sorted((r["origin"], r["sender"], r["destination"], r["message_id"]) for r in sent) == [
        ("client", "client", "orders", "m1"),
        ("handler", "orders", "loyalty", "m3a"),
        ("handler", "orders", "payments", "m2"),
        ("handler", "orders", "shipping", "m3b"),
        ("handler", "payments", "shipping", "m4"),
    ]
    by_id = {r["message_id"]: r for r in sent}
    assert utc(by_id["m2"]["sent_at"]) == at(1.0)  # a handler's sends leave with its commit


def test_a_planted_duplicate_in_another_partition_is_found(spark: Any) -> None:
    from shared.audit import checks

    rows, sends = clean_flow()
    rows.append(audit("payments", "m2", source="orders", sent=1.0, processed=9.0, partition="p2"))
    audit_df, _ = frames(spark, rows, sends)

    [dup] = checks.duplicate_processings(audit_df).collect()
    processed = {
        (r["endpoint"], r["message_id"]): r["processings"]
        for r in checks.processed_deliveries(audit_df).collect()
    }
    result = verdicts(spark, rows, sends)

    assert (dup["endpoint"], dup["message_id"], dup["processings"]) == ("payments", "m2", 2)
    assert dup["locations"] == ["payments/p1", "payments/p2"]
    assert (utc(dup["first_processed_at"]), utc(dup["last_processed_at"])) == (at(1.5), at(9.0))
    assert flagged(result, "duplicate") == {("payments", "m2")}
    assert flagged(result, "ghost") == set()  # the duplicate was sent, so it is no ghost
    assert processed[("payments", "m2")] == 2
    assert sum(processed.values()) == len(rows)


def test_the_same_delivery_audited_by_two_modes_is_a_duplicate(spark: Any) -> None:
    from shared.audit import checks

    rows, sends = clean_flow()
    rows.append(audit("loyalty", "m3a", source="orders", table="loyaltyv2", mode="entity-outbox"))
    audit_df, _ = frames(spark, rows, sends)

    [dup] = checks.duplicate_processings(audit_df).collect()

    assert dup["locations"] == ["loyalty/p1", "loyaltyv2/p1"]
    assert dup["modes"] == ["entity-outbox", "token"]


def test_a_planted_loss_is_found_once_it_is_older_than_the_threshold(spark: Any) -> None:
    rows, sends = clean_flow()
    rows = [r for r in rows if r[3] != "m4"]  # shipping never processed ShipOrder

    late = verdicts(spark, rows, sends, as_of_seconds=1.5 + 301)
    early = verdicts(spark, rows, sends, as_of_seconds=1.5 + 299)

    assert flagged(late, "lost") == {("shipping", "m4")}
    assert flagged(late, "in_flight") == set()
    assert late[("shipping", "m4")]["sender"] == "payments"
    assert late[("shipping", "m4")]["processings"] == 0
    assert flagged(early, "lost") == set()
    assert flagged(early, "in_flight") == {("shipping", "m4")}


def test_a_delivery_is_keyed_by_destination_and_message_id(spark: Any) -> None:
    rows, sends = clean_flow()
    # An id that reached loyalty does not vouch for a delivery of the same id to shipping.
    rows[0] = audit(
        "orders",
        "m1",
        processed=1.0,
        sends=(*ORDERS_SENDS, ("m3a", "OrderPlaced", "shipping")),
    )

    result = verdicts(spark, rows, sends)

    assert flagged(result, "lost") == {("shipping", "m3a")}


def test_a_planted_ghost_is_found(spark: Any) -> None:
    rows, sends = clean_flow()
    rows.append(audit("shipping", "m9", source="payments", message_type="ShipOrder"))

    result = verdicts(spark, rows, sends)

    assert flagged(result, "ghost") == {("shipping", "m9")}
    ghost = result[("shipping", "m9")]
    assert (ghost["sender"], ghost["message_type"], ghost["sent_at"]) == (
        "payments",
        "ShipOrder",
        None,
    )
    assert flagged(result, "lost") == set()


def test_a_client_send_without_its_ingress_record_makes_a_ghost(spark: Any) -> None:
    rows, _ = clean_flow()

    result = verdicts(spark, rows, [])

    assert flagged(result, "ghost") == {("orders", "m1")}


def test_lost_and_ghost_helpers_agree_with_the_reconciliation(spark: Any) -> None:
    from shared.audit import checks

    rows, sends = clean_flow()
    rows = [r for r in rows if r[3] != "m3a"]
    rows.append(audit("loyalty", "m7"))
    audit_df, ingress_df = frames(spark, rows, sends)
    sent = checks.sent_deliveries(audit_df, ingress_df)

    lost = checks.lost_messages(sent, audit_df, as_of=at(3600), lost_after=timedelta(0))
    ghosts = checks.ghost_messages(sent, audit_df)

    assert [(r["destination"], r["message_id"]) for r in lost.collect()] == [("loyalty", "m3a")]
    assert [(r["destination"], r["message_id"]) for r in ghosts.collect()] == [("loyalty", "m7")]


def test_the_flow_graph_counts_each_edge(spark: Any) -> None:
    from shared.audit.compute import AuditOptions, run_audit

    rows, sends = clean_flow()
    rows = [r for r in rows if r[3] not in ("m3b", "m4")]  # both lost
    rows.append(audit("payments", "m2", source="orders", processed=5.0, partition="p2"))
    audit_df, ingress_df = frames(spark, rows, sends)

    summary = run_audit(audit_df, ingress_df, AuditOptions(as_of=at(3600)))

    edges = {
        (e.sender, e.destination, e.message_type): (
            e.sent,
            e.processed,
            e.duplicate,
            e.lost,
            e.ghost,
        )
        for e in summary.flow
    }
    assert edges == {
        ("client", "orders", "PlaceOrder"): (1, 1, 0, 0, 0),
        ("orders", "payments", "ChargeCard"): (1, 1, 1, 0, 0),
        ("orders", "loyalty", "OrderPlaced"): (1, 1, 0, 0, 0),
        ("orders", "shipping", "OrderPlaced"): (1, 0, 0, 1, 0),
        # nothing of this edge was processed: named from the sent side
        ("payments", "shipping", "ShipOrder"): (1, 0, 0, 1, 0),
    }


def latency_of(spark: Any, rows: list[tuple[object, ...]]) -> Any:
    """The summary's latency rows and histogram of ``rows``, through the digest."""
    from shared.audit import checks
    from shared.audit.latency import LatencyBucket, latency_figures

    audit_df, _ = frames(spark, rows, [])
    digest = checks.latency_digest(audit_df, 60).collect()
    return latency_figures(
        (
            r["endpoint"],
            LatencyBucket(r["code"], r["count"], r["sum_us"], r["min_us"], r["max_us"]),
        )
        for r in digest
        if r["traffic"] == 0 and r["code"] is not None
    )


def test_latency_percentiles_per_endpoint(spark: Any) -> None:
    rows = [audit("orders", f"m{i}", sent=0, processed=i / 1000) for i in range(1, 101)]
    rows.append(audit("payments", "x", sent=10, processed=10.25))

    latency, _ = latency_of(spark, rows)

    orders, payments = latency
    assert (orders.endpoint, orders.count) == ("orders", 100)
    # Each latency has a bucket of its own here: the percentiles are exact.
    assert (orders.p50_ms, orders.p90_ms, orders.p99_ms) == pytest.approx((50, 90, 99))
    assert orders.max_ms == pytest.approx(100)
    assert orders.mean_ms == pytest.approx(50.5)
    assert (payments.endpoint, payments.p50_ms, payments.max_ms) == ("payments", 250, 250)


def test_percentiles_are_within_their_stated_error_of_the_exact_ones(spark: Any) -> None:
    """Latencies of every size, sub-millisecond and negative ones included, many to a
    bucket: each percentile is within half a bucket (0.14%, or a few microseconds under
    1 ms) of the exact nearest-rank one."""
    import math
    import random

    from lab.audit.baseline import nearest_rank

    draw = random.Random(48)
    micros = [draw.choice([-3_000, 0, 400, 999, 1_000, 250_000]) for _ in range(50)]
    micros += [int(draw.lognormvariate(9, 2.5)) - 2_000 for _ in range(3_000)]
    rows = [audit("orders", f"m{i}", sent=0, processed=us / 1e6) for i, us in enumerate(micros)]

    [orders], _ = latency_of(spark, rows)

    exact = sorted(us / 1000 for us in micros)
    for p, found in zip(
        (0.5, 0.9, 0.99), (orders.p50_ms, orders.p90_ms, orders.p99_ms), strict=True
    ):
        want = nearest_rank(exact, p)
        tolerance = 0.0014 * abs(want) if want >= 1 else 0.0014 * (1 - want) + 1e-9
        assert math.isclose(found, want, abs_tol=tolerance), (p, found, want)
    assert orders.max_ms == max(exact)
    assert orders.mean_ms == pytest.approx(sum(exact) / len(exact))


def test_the_latency_histogram_uses_quarter_doublings(spark: Any) -> None:
    from shared.audit import checks

    rows = [
        audit("orders", "a", sent=0, processed=0.0005),  # under 1 ms: bucket 0
        audit("orders", "b", sent=1, processed=0.999),  # negative (clock skew): bucket 0
        audit("orders", "c", sent=0, processed=0.1),  # 100 ms: floor(4 * log2(100)) = 26
        audit("orders", "d", sent=0, processed=0.105),
        audit("orders", "e", sent=0, processed=0.002),  # 2 ms, a bucket's lower bound: 4
    ]

    _, histogram = latency_of(spark, rows)

    lower, upper = checks.bucket_bounds(26)
    assert [(h.lower_ms, h.upper_ms, h.count) for h in histogram] == [
        (0.0, 2**0.25, 2),
        (2.0, 2**1.25, 1),
        (lower, upper, 2),
    ]
    assert lower <= 100 < 105 < upper
    assert [checks.histogram_bucket_of(c) for c in (-5, 0, 63, 64, 26 * 64 + 63)] == [
        0,
        0,
        0,
        1,
        26,
    ]


def test_throughput_counts_processings_per_bucket_and_endpoint(spark: Any) -> None:
    from shared.audit import checks

    rows = [
        audit("orders", "a", processed=1),
        audit("orders", "b", processed=59),
        audit("orders", "c", processed=61),
        audit("payments", "d", processed=2),
    ]
    audit_df, _ = frames(spark, rows, [])

    traffic = [r for r in checks.latency_digest(audit_df, 60).collect() if r["traffic"]]

    assert sorted((utc(r["bucket_start"]), r["endpoint"], r["count"]) for r in traffic) == [
        (at(0), "orders", 2),
        (at(0), "payments", 1),
        (at(60), "orders", 1),
    ]
    with pytest.raises(ValueError, match="at least 1"):
        checks.latency_digest(audit_df, 0)


def spoiled(row: Any, index: int, value: object) -> tuple[Any, ...]:
    """``row`` with one field replaced: how a bad row is planted."""
    fields = list(row)
    fields[index] = value
    return tuple(fields)


def test_unreadable_rows_are_reported(spark: Any) -> None:
    from shared.audit import checks

    rows, sends = clean_flow()
    broken = spoiled(audit("orders", "m8", partition="p8"), 11, None)  # unreadable when stored
    missing_id = spoiled(audit("orders", "m9", partition="p9"), 3, None)
    no_destination = spoiled(
        audit("orders", "m10", partition="p10"),
        11,
        [{"id": "x", "type": "T", "destination": None}],
    )
    bad_ingress = spoiled(ingress("k2", ("m11", "T", "orders")), 6, None)
    audit_df, ingress_df = frames(
        spark, [*rows, broken, missing_id, no_destination], [*sends, bad_ingress]
    )

    problems = sorted(
        (r["kind"], r["partition_key"], r["problem"])
        for r in checks.invalid_rows(audit_df, ingress_df).collect()
    )

    assert problems == [
        ("audit", "p10", "caused unreadable"),
        ("audit", "p8", "caused unreadable"),
        ("audit", "p9", "message_id missing"),
        ("ingress", "k2", "outgoing unreadable"),
    ]


@pytest.mark.parametrize(
    ("span", "width"), [(0, 1), (100, 1), (121, 2), (3600, 30), (86400, 900), (10**8, 864000)]
)
def test_throughput_buckets_are_round_and_few(span: float, width: int) -> None:
    from shared.audit.checks import choose_bucket_seconds

    assert choose_bucket_seconds(span) == width
    assert span / width <= 120


def test_run_audit_counts_rows_and_invalid_rows_in_its_one_pass(spark: Any) -> None:
    from shared.audit import checks
    from shared.audit.compute import AuditOptions, run_audit

    rows, sends = clean_flow()
    broken = spoiled(audit("orders", "m8", partition="p8"), 11, None)
    no_time = spoiled(audit("orders", "m9", partition="p9"), 10, None)
    # Entries with nothing in them, as the marks of invalid rows are: still one row.
    empty = {"id": None, "type": None, "destination": None}
    hollow = spoiled(audit("orders", "m10", partition="p10"), 11, [empty, empty, empty])
    bad_ingress = spoiled(ingress("k2", ("m11", "T", "orders")), 6, None)
    invalid = [broken, no_time, hollow]
    audit_df, ingress_df = frames(spark, [*rows, *invalid], [*sends, bad_ingress])

    summary = run_audit(audit_df, ingress_df, AuditOptions(as_of=at(3600)))

    assert (summary.audit_rows, summary.ingress_rows) == (len(rows) + 3, len(sends) + 1)
    assert summary.invariants.invalid_rows == 4
    assert summary.verdict == "FAIL"
    assert sorted(s["partition_key"] for s in summary.samples["invalid_rows"]) == [
        "k2",
        "p10",
        "p8",
        "p9",
    ]
    # The marks count as invalid rows and as nothing else: every delivery's verdict is
    # what the reconciliation of the unmarked deliveries says.
    unmarked = checks.flow_graph(
        checks.reconcile(
            checks.sent_deliveries(audit_df, ingress_df),
            audit_df,
            as_of=at(3600),
            lost_after=timedelta(minutes=5),
        )
    ).collect()
    inv = summary.invariants
    assert (summary.sent, summary.processed, inv.lost, inv.ghosts, inv.duplicates) == tuple(
        sum(r[k] for r in unmarked) for k in ("sent", "processed", "lost", "ghost", "duplicate")
    )
    assert sum(e.sent for e in summary.flow) == summary.sent


def test_the_digest_counts_latencies_traffic_and_edges_in_one_scan(spark: Any) -> None:
    from collections import Counter

    from pyspark.sql import functions as F

    from shared.audit import checks

    rows = [
        audit("orders", "a", sent=0, processed=0.0005),
        audit("orders", "b", sent=0, processed=0.1),
        audit("orders", "c", sent=0, processed=61),
        audit("payments", "d", source="orders", message_type="Pay", sent=1, processed=2),
        spoiled(audit("payments", "e", processed=3), 9, None),  # no send time: no latency
        audit("web", "s", mode="session", processed=4),  # a session's row: no processing
    ]
    audit_df, _ = frames(spark, rows, [])

    digest = checks.latency_digest(audit_df, 60).collect()

    # Every row is counted once in the latency rows, a session's too (with no latency).
    assert sum(r["count"] for r in digest if not r["traffic"]) == len(rows)
    latencies = [r for r in digest if not r["traffic"] and r["code"] is not None]
    timed = Counter({r["endpoint"]: 0 for r in latencies})
    for r in latencies:
        timed[r["endpoint"]] += r["count"]
    assert timed == {"orders": 3, "payments": 1}
    # The session's row is counted, with neither an edge nor a throughput bucket.
    processings = [r for r in digest if r["traffic"] and r["edge"] is not None]
    sessions = [r for r in digest if r["traffic"] and r["edge"] is None]
    assert [(r["endpoint"], r["bucket_start"], r["count"]) for r in sessions] == [("web", None, 1)]
    traffic: Counter[tuple[Any, str]] = Counter()
    for r in processings:
        traffic[(utc(r["bucket_start"]), r["endpoint"])] += r["count"]
    assert traffic == {(at(0), "orders"): 2, (at(60), "orders"): 1, (at(0), "payments"): 2}
    coded = audit_df.select(
        checks.edge_code(F.col("source"), F.col("message_type")).alias("edge"),
        "source",
        "message_type",
    ).where(F.col("endpoint") != "web")
    assert {(r["edge"], r["source"], r["message_type"]) for r in processings} == {
        (r["edge"], r["source"], r["message_type"]) for r in coded.collect()
    }
    assert {(r["source"], r["message_type"]) for r in processings} == {
        ("client", "Cmd"),
        ("orders", "Pay"),
    }
    assert {r["outcome"] for r in digest if r["traffic"]} == {None}


def test_cancelled_and_saga_not_found_rows_are_counted_as_their_messages_processing(
    spark: Any,
) -> None:
    """A cancelled message's row and a saga's not-found row are each the one processing of
    their message (neither lost nor doubled), and the audit counts them by outcome."""
    from shared.audit.compute import AuditOptions, run_audit

    rows, sends = clean_flow()
    deadline = ("m9", "PaymentDue", "orders")
    rows[0] = audit(
        "orders", "m1", message_type="PlaceOrder", processed=1.0, sends=(*ORDERS_SENDS, deadline)
    )
    rows.append(
        audit("orders", "m9", message_type="PaymentDue", sent=1, processed=2, outcome="cancelled")
    )
    rows.append(
        audit(
            "loyalty",
            "m5",
            message_type="PaymentReceived",
            source="client",
            processed=3,
            outcome="saga_not_found",
        )
    )
    sends.append(ingress("pay-1", ("m5", "PaymentReceived", "loyalty")))
    audit_df, ingress_df = frames(spark, rows, sends)

    summary = run_audit(audit_df, ingress_df, AuditOptions(as_of=at(3600)))

    assert (summary.sent, summary.processed, summary.verdict) == (7, 7, "PASS")
    assert summary.outcomes == {"cancelled": 1, "saga_not_found": 1}
    assert "cancelled=1 saga_not_found=1 verdict=PASS" in summary.one_line()
    clean, clean_sends = clean_flow()
    clean_audit, clean_ingress = frames(spark, clean, clean_sends)
    plain = run_audit(clean_audit, clean_ingress, AuditOptions(as_of=at(3600)))
    assert plain.outcomes == {}
    assert "cancelled" not in plain.one_line()
