"""Real messages through the bus, then audited: on the in-memory stores (read in the driver)
and on Azurite (read by Spark tasks with the SDK inside mapPartitions)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.audit.next_steps import NOTHING_TO_DO
from shared.bus.envelope import Signal
from shared.bus.poison import Reason, park, replay
from shared.bus.records import AuditRecord
from shared.clock import ManualClock
from shared.settings import StorageSettings
from shared.stores.memory import MemoryStorageAccount
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.spark


async def read(
    spark: Any, request: pytest.FixtureRequest, harness: Harness, names: FlowNames
) -> tuple[Any, Any, Any]:
    tables: dict[str, Any] = {
        "endpoint_tables": names.all,
        "ingress_tables": [harness.config.ingress_table],
    }
    if harness.backend.name == "memory":
        from shared.audit.account_source import read_account

        tokens = harness.config.tokens_container
        return await read_account(spark, harness.raw, **tables, tokens_container=tokens)
    from shared.audit.table_source import read_poisoned, read_tables

    endpoints = request.getfixturevalue("azurite")
    settings = StorageSettings(connection_string=endpoints.connection_string)
    # Tables of more than 2 rows are split into Spark tasks (3 ranges each), the rest are
    # read by the driver: both paths run.
    audit_df, ingress_df = read_tables(spark, settings, splits=3, small_table_rows=2, **tables)
    tokens = harness.config.tokens_container
    return audit_df, ingress_df, await read_poisoned(spark, settings, names.all, tokens=tokens)


def audit_now(audit_df: Any, ingress_df: Any, poisoned_df: Any = None) -> Any:
    from shared.audit.compute import AuditOptions, run_audit

    as_of = datetime.now(UTC) + timedelta(hours=1)  # every unprocessed message is overdue
    return run_audit(audit_df, ingress_df, AuditOptions(as_of=as_of), poisoned=poisoned_df)


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

    summary = audit_now(
        *await read_account(
            spark,
            harness.raw,
            endpoint_tables=names.all,
            ingress_tables=[harness.config.ingress_table],
        )
    )

    assert summary.invariants.duplicates == 1
    [dup] = summary.samples["duplicates"]
    assert dup["message_id"] == row["message_id"]
    assert dup["locations"] == [
        f"{names.payments}/elsewhere",
        f"{names.payments}/{row.partition_key}",
    ]
    assert json.loads(summary.to_json())["invariants"]["duplicates"] == 1


async def test_an_empty_freshly_provisioned_account_passes_with_zero_counts(
    spark: Any, backend: Backend, request: pytest.FixtureRequest
) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names))  # provisions, sends nothing

    summary = audit_now(*await read(spark, request, harness, names))

    assert summary.verdict == "PASS"
    assert (summary.audit_rows, summary.ingress_rows, summary.sent, summary.processed) == (
        0,
        0,
        0,
        0,
    )
    assert (summary.in_flight, summary.poisoned, summary.invariants.violated) == (0, 0, False)
    assert (summary.flow, summary.latency, summary.histogram, summary.throughput) == (
        [],
        [],
        [],
        [],
    )
    assert summary.next_steps == [NOTHING_TO_DO]


async def test_a_parked_message_is_poisoned_not_lost_until_it_is_replayed(
    spark: Any, backend: Backend, request: pytest.FixtureRequest
) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names))
    client = harness.setup_bus.client()
    for i in range(2):
        await client.send(
            PlaceOrder(order_id=f"o{i}", amount=10), to=names.orders, idempotency_key=f"o{i}"
        )
    [message] = await harness.raw.queue(names.orders).receive(1)
    await harness.raw.queue(names.orders).delete(message.id, message.pop_receipt)
    reason = Reason(names.orders, "ValueError: card declined", 5, error_type="ValueError")
    await park(harness.raw, message.content, reason, harness.config.parked_container)
    # Hostile poison-queue contents count as poison messages that cover no delivery.
    await harness.raw.queue(f"{names.orders}-poison").send('{"poison": 7}')
    await harness.run_until_quiet()
    parked_id = Signal.parse(message.content).message_id

    summary = audit_now(*await read(spark, request, harness, names))

    assert summary.verdict == "PASS"
    assert (summary.poisoned, summary.invariants.lost, summary.in_flight) == (1, 0, 0)
    assert summary.poison_messages == {f"{names.orders}-poison": 2}
    [sample] = summary.samples["poisoned"]
    assert (sample["message_id"], sample["reason"]) == (parked_id, "ValueError: card declined")
    assert sample["queue"] == f"{names.orders}-poison"
    assert summary.unverifiable_poison == 1
    assert summary.poison_unverifiable == {f"{names.orders}-poison": 1}
    [damaged] = summary.samples["unverifiable_poison"]
    assert "unreadable wrapper" in damaged["problem"]
    [edge] = [e for e in summary.flow if e.destination == names.orders]
    assert (edge.sent, edge.processed, edge.poisoned, edge.lost) == (2, 1, 1, 0)
    [step] = [s for s in summary.next_steps if "wait in poison queues" in s]
    assert f"bus replay {names.orders}" in step
    [forged] = [s for s in summary.next_steps if "cover no delivery" in s]
    assert f"bus poison list {names.orders}" in forged
    assert "poisoned=1 unverifiable_poison=1 verdict=PASS" in summary.one_line()

    # The operator replays it: processed once, no longer poisoned; the unreadable one stays.
    await replay(harness.raw, names.orders, container=harness.config.parked_container)
    await harness.run_until_quiet()
    after = audit_now(*await read(spark, request, harness, names))
    assert (after.poisoned, after.invariants.lost, after.invariants.duplicates) == (0, 0, 0)
    assert after.sent == after.processed
    assert after.poison_messages == {f"{names.orders}-poison": 1}


@pytest.mark.azurite
async def test_small_tables_are_read_by_the_driver_not_by_a_task_per_range(
    spark: Any, azurite: Any
) -> None:
    from shared.audit.table_source import SPLITS_DEFAULT, probe_tables, read_tables
    from shared.settings import StorageSettings
    from shared.stores.azure import AzureStorageAccount

    settings = StorageSettings(connection_string=azurite.connection_string)
    account = AzureStorageAccount(settings)
    try:
        harness, names = await run_orders(Backend("azurite", account))
    finally:
        await account.close()
    tables = {"endpoint_tables": names.all, "ingress_tables": [harness.config.ingress_table]}

    small = probe_tables(settings, names.all, "audit")
    split = probe_tables(settings, names.all, "audit", page_size=2)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("small-plan", "an audit of a small account")
    try:
        summary = audit_now(
            *read_tables(
                spark,
                settings,
                endpoint_tables=tables["endpoint_tables"],
                ingress_tables=tables["ingress_tables"],
            )
        )
    finally:
        spark.sparkContext.setJobGroup("after", "")
    stages = [
        tracker.getStageInfo(stage)
        for job in tracker.getJobIdsForGroup("small-plan")
        for stage in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
    ]

    assert (small.large, len(small.rows)) == ([], ORDERS * DELIVERIES_PER_ORDER)
    assert set(split.large) == set(names.all)  # more than a page of 2: split into tasks
    assert summary.sent == summary.processed == ORDERS * DELIVERIES_PER_ORDER
    # The plan that split every table would have run one task per range and table in a stage.
    slices = SPLITS_DEFAULT * len(names.all)
    assert max(s.numTasks for s in stages if s is not None) < slices
