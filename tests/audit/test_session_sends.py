"""A transactional session's audit row (mode ``session``, issue 45) in the audit: what it
caused counts as sent, like a handler's outputs, and the row itself is no processing (nobody
sent the session), so it is never a ghost or a duplicate, nor a latency or throughput point.

The session here belongs to endpoint ``orders``: its row ``audit|s1`` lists the PlaceOrder it
sent to ``billing``, whose processing names the session as its causation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.audit.conftest import at, audit, utc
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.audit.test_bus_audit import audit_now, read
from tests.audit.test_checks import frames, spoiled
from tests.bus.flow import PlaceOrder
from tests.conftest import Backend

pytestmark = pytest.mark.spark

PLACE_ORDER = ("m1", "PlaceOrder", "billing")
CAUSATION = 7  # the column of an audit row's causation id (shared.audit.rows.AUDIT_COLUMNS)


def session(
    session_id: str, *sends: tuple[str, str, str], committed: float = 1.0, partition: str = "p1"
) -> tuple[object, ...]:
    """The audit row a session of endpoint ``orders`` commits with its writes and sends."""
    return audit(
        "orders",
        session_id,
        source="web",
        message_type="Session",
        sent=committed - 0.5,
        processed=committed,
        sends=sends,
        partition=partition,
        mode="session",
    )


def processed_by_billing(
    message_id: str, causation: str, *, processed: float = 2.0
) -> tuple[object, ...]:
    row = audit(
        "billing",
        message_id,
        source="orders",
        message_type="PlaceOrder",
        sent=1.0,
        processed=processed,
    )
    return spoiled(row, CAUSATION, causation)


def run(spark: Any, rows: list[tuple[object, ...]], as_of_seconds: float = 3600.0) -> Any:
    from shared.audit.compute import AuditOptions, run_audit

    audit_df, ingress_df = frames(spark, rows, [])
    return run_audit(audit_df, ingress_df, AuditOptions(as_of=at(as_of_seconds)))


def flow_of(summary: Any) -> dict[tuple[str, str, str], tuple[int, ...]]:
    return {
        (e.sender, e.destination, e.message_type): (e.sent, e.processed, e.lost, e.ghost)
        for e in summary.flow
    }


def test_a_session_sends_what_it_caused_from_its_endpoint_at_its_commit(spark: Any) -> None:
    from shared.audit import checks

    audit_df, ingress_df = frames(spark, [session("s1", PLACE_ORDER)], [])

    [sent] = checks.sent_deliveries(audit_df, ingress_df).collect()

    assert (sent["origin"], sent["sender"], sent["incoming_id"]) == ("session", "orders", "s1")
    assert (sent["message_id"], sent["message_type"], sent["destination"]) == PLACE_ORDER
    assert utc(sent["sent_at"]) == at(1.0)  # its outputs leave with the commit


def test_a_committed_session_whose_message_was_processed_once_passes(spark: Any) -> None:
    summary = run(spark, [session("s1", PLACE_ORDER), processed_by_billing("m1", "s1")])

    assert summary.verdict == "PASS"
    assert (summary.audit_rows, summary.sent, summary.processed) == (2, 1, 1)
    assert (summary.invariants.ghosts, summary.invariants.duplicates) == (0, 0)
    assert flow_of(summary) == {("orders", "billing", "PlaceOrder"): (1, 1, 0, 0)}
    # Only billing processed anything: the session's row is no latency or throughput point.
    assert [e.endpoint for e in summary.latency] == ["billing"]
    assert sum(p.count for p in summary.throughput) == 1


def test_a_committed_session_whose_message_was_never_processed_loses_it(spark: Any) -> None:
    rows = [session("s1", PLACE_ORDER, committed=1.0)]

    early = run(spark, rows, as_of_seconds=1.0 + 299)
    late = run(spark, rows, as_of_seconds=1.0 + 301)

    assert (early.verdict, early.in_flight, early.invariants.lost) == ("PASS", 1, 0)
    assert (late.verdict, late.invariants.lost, late.invariants.ghosts) == ("FAIL", 1, 0)
    [lost] = late.samples["lost"]
    assert (lost["sender"], lost["destination"], lost["message_id"]) == ("orders", "billing", "m1")
    assert flow_of(late) == {("orders", "billing", "PlaceOrder"): (1, 0, 1, 0)}


def test_a_message_of_a_rolled_back_session_is_a_ghost(spark: Any) -> None:
    # s2 rolled back: its row never committed, yet billing processed a message it names.
    rows = [
        session("s1", PLACE_ORDER),
        processed_by_billing("m1", "s1"),
        processed_by_billing("m2", "s2", processed=3.0),
    ]

    summary = run(spark, rows)

    assert summary.verdict == "FAIL"
    assert summary.invariants.ghosts == 1
    assert [(g["destination"], g["message_id"]) for g in summary.samples["ghosts"]] == [
        ("billing", "m2")
    ]
    assert (summary.invariants.lost, summary.invariants.duplicates) == (0, 0)


def test_a_session_row_alone_is_neither_a_ghost_nor_a_duplicate(spark: Any) -> None:
    from shared.audit import checks

    nothing_sent = session("s1")  # a session that only wrote the user's rows
    unreadable = spoiled(session("s2", partition="p2"), 11, None)
    rows = [nothing_sent, unreadable]
    audit_df, ingress_df = frames(spark, rows, [])

    summary = run(spark, rows)

    assert (summary.invariants.ghosts, summary.invariants.duplicates) == (0, 0)
    assert (summary.audit_rows, summary.sent, summary.processed) == (2, 0, 0)
    assert summary.flow == []
    assert summary.latency == []
    # A session row is checked as every row is: one whose caused list is unreadable is invalid.
    assert summary.invariants.invalid_rows == 1
    assert [r["partition_key"] for r in checks.invalid_rows(audit_df, ingress_df).collect()] == [
        "p2"
    ]
    assert checks.processed_deliveries(audit_df).collect() == []
    assert checks.duplicate_processings(audit_df.unionByName(audit_df)).collect() == []


def test_a_parked_session_message_is_poisoned_not_lost(spark: Any) -> None:
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.schema import POISONED_SCHEMA

    audit_df, ingress_df = frames(spark, [session("s1", PLACE_ORDER)], [])
    # The signal of a session's delivery: its token names the session's endpoint and id.
    entry = ("billing-poison", "billing", "m1", "PlaceOrder", "boom", "orders", "s1", "m1")
    poisoned = spark.createDataFrame([(*entry, None, None)], POISONED_SCHEMA)

    summary = run_audit(audit_df, ingress_df, AuditOptions(as_of=at(3600)), poisoned=poisoned)

    assert (summary.verdict, summary.poisoned, summary.unverifiable_poison) == ("PASS", 1, 0)
    assert (summary.invariants.lost, summary.invariants.ghosts) == (0, 0)


def test_the_reconciliation_counts_a_session_delivery_sent_once_and_processed_once(
    spark: Any,
) -> None:
    from shared.audit import checks

    rows = [session("s1", PLACE_ORDER), processed_by_billing("m1", "s1")]
    audit_df, ingress_df = frames(spark, rows, [])
    sent = checks.sent_deliveries(audit_df, ingress_df)

    reconciled = checks.reconcile(
        sent, audit_df, as_of=at(3600), lost_after=timedelta(minutes=5)
    ).collect()

    counted = [
        (r["destination"], r["message_id"], r["sends"], r["processings"]) for r in reconciled
    ]
    assert counted == [("billing", "m1", 1, 1)]
    assert not any(r["ghost"] or r["duplicate"] for r in reconciled)


async def test_a_real_session_is_audited_as_its_endpoint_sending(
    spark: Any, backend: Backend, request: pytest.FixtureRequest
) -> None:
    """Real orders through the bus, and one more placed by a web request's session on the
    orders endpoint: its audit row sends the PlaceOrder, which is processed once; the audit
    passes with every delivery sent once and processed once."""
    harness, names = await run_orders(backend)
    harness.app.get(names.orders).sessions = True
    async with harness.bus.session(names.orders, partition="web-1", key="request-1") as s:
        s.send(PlaceOrder(order_id="web-1", amount=10), to=names.orders)
    await harness.run_until_quiet()

    summary = audit_now(*await read(spark, request, harness, names))

    assert summary.verdict == "PASS"
    assert (summary.invariants.ghosts, summary.invariants.duplicates) == (0, 0)
    orders = ORDERS + 1
    assert (summary.audit_rows, summary.ingress_rows) == (orders * DELIVERIES_PER_ORDER + 1, ORDERS)
    assert summary.sent == summary.processed == orders * DELIVERIES_PER_ORDER
    placed = {e.sender: e.processed for e in summary.flow if e.message_type == "PlaceOrder"}
    assert placed == {"ingress": ORDERS, names.orders: 1}
