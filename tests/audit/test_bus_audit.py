"""Real messages through the bus, then audited: on the in-memory stores (read in the driver)
and on Azurite (read by Spark tasks with the SDK inside mapPartitions)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.bus.records import AuditRecord
from shared.clock import ManualClock
from shared.settings import StorageSettings
from shared.stores.memory import MemoryStorageAccount
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.bus.flow import FlowNames
from tests.bus.harness import Harness
from tests.conftest import Backend

pytestmark = pytest.mark.spark


async def read(
    spark: Any, request: pytest.FixtureRequest, harness: Harness, names: FlowNames
) -> tuple[Any, Any]:
    tables = {"endpoint_tables": names.all, "ingress_tables": [harness.config.ingress_table]}
    if harness.backend.name == "memory":
        from shared.audit.account_source import read_account

        return await read_account(spark, harness.raw, **tables)
    from shared.audit.table_source import read_tables

    endpoints = request.getfixturevalue("azurite")
    settings = StorageSettings(connection_string=endpoints.connection_string)
    return read_tables(spark, settings, splits=3, **tables)


def audit_now(audit_df: Any, ingress_df: Any) -> Any:
    from shared.audit.compute import AuditOptions, run_audit

    as_of = datetime.now(UTC) + timedelta(hours=1)  # every unprocessed message is overdue
    return run_audit(audit_df, ingress_df, AuditOptions(as_of=as_of))


async def test_a_clean_run_has_no_duplicates_losses_or_ghosts(
    spark: Any, backend: Backend, request: pytest.FixtureRequest
) -> None:
    harness, names = await run_orders(backend)

    summary = audit_now(*await read(spark, request, harness, names))

    assert summary.verdict == "PASS"
    assert summary.audit_rows == ORDERS * DELIVERIES_PER_ORDER
    assert summary.ingress_rows == ORDERS
    assert summary.sent == summary.processed == ORDERS * DELIVERIES_PER_ORDER
    assert (summary.invariants.duplicates, summary.invariants.lost) == (0, 0)
    assert (summary.invariants.ghosts, summary.invariants.invalid_rows) == (0, 0)
    edges = {(e.sender, e.destination, e.message_type): e.processed for e in summary.flow}
    assert edges == {
        ("ingress", names.orders, "PlaceOrder"): ORDERS,
        (names.orders, names.payments, "ChargeCard"): ORDERS,
        (names.orders, names.loyalty, "OrderPlaced"): ORDERS,
        (names.orders, names.shipping, "OrderPlaced"): ORDERS,
        (names.payments, names.shipping, "ShipOrder"): ORDERS,
    }
    assert {e.endpoint: e.count for e in summary.latency} == {n: ORDERS for n in names.all} | {
        names.shipping: 2 * ORDERS
    }


async def test_a_planted_loss_and_ghost_are_found(
    spark: Any, request: pytest.FixtureRequest
) -> None:
    harness, names = await run_orders(Backend("memory", MemoryStorageAccount(ManualClock())))
    loyalty = harness.raw.table(names.loyalty)
    [victim, *_] = [e async for e in loyalty.query_all(row_key_prefix="audit|")]
    await loyalty.delete(victim.partition_key, victim.row_key)  # as if never processed
    now = datetime.now(UTC)
    ghost = AuditRecord(
        partition_key="o9",
        endpoint=names.shipping,
        message_id="made-up",
        message_type="ShipOrder",
        source=names.payments,
        correlation_id="nobody",
        causation_id=None,
        sent_at=now,
        processed_at=now,
        mode="token",
    )
    await harness.raw.table(names.shipping).insert(ghost.to_entity())

    summary = audit_now(*await read(spark, request, harness, names))

    assert summary.verdict == "FAIL"
    assert (summary.invariants.lost, summary.invariants.ghosts) == (1, 1)
    assert summary.invariants.duplicates == 0
    [lost] = summary.samples["lost"]
    assert (lost["destination"], lost["message_id"]) == (names.loyalty, victim["message_id"])
    assert (lost["sender"], lost["message_type"]) == (names.orders, "OrderPlaced")
    [made_up] = summary.samples["ghosts"]
    assert (made_up["destination"], made_up["message_id"]) == (names.shipping, "made-up")


async def test_a_message_audited_in_two_partitions_is_a_duplicate(spark: Any) -> None:
    from shared.audit.account_source import read_account

    harness, names = await run_orders(Backend("memory", MemoryStorageAccount(ManualClock())))
    payments = harness.raw.table(names.payments)
    [row, *_] = [e async for e in payments.query_all(row_key_prefix="audit|")]
    await payments.insert(type(row)("elsewhere", row.row_key, dict(row.properties)))

    audit_df, ingress_df = await read_account(
        spark,
        harness.raw,
        endpoint_tables=names.all,
        ingress_tables=[harness.config.ingress_table],
    )
    summary = audit_now(audit_df, ingress_df)

    assert summary.invariants.duplicates == 1
    [dup] = summary.samples["duplicates"]
    assert dup["message_id"] == row["message_id"]
    assert dup["locations"] == [
        f"{names.payments}/elsewhere",
        f"{names.payments}/{row.partition_key}",
    ]
    assert json.loads(summary.to_json())["invariants"]["duplicates"] == 1
