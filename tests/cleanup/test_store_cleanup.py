"""The cleanup over endpoints that keep their rows off tables: in PostgreSQL (and its
in-memory model), in Cosmos DB (its model and the local server) and in blob documents (in
memory and on Azurite).
The same job retires their O(m), removes abandoned tokens by asking their O(m) in that
store, and expires their audit rows; a committed token not consumed yet is never touched.
For the window modes, it judges tokens by their rows in the store and expires those rows
after their window."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.bus.app import Mode
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX
from shared.bus.modes.state_based import INDEX_PREFIX
from shared.bus.records import STATE_ROW
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.stores.instrumented import Fault, FaultPlan, Operation, fault_at_first
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import (
    DOCUMENT_BACKENDS,
    DOCUMENT_WINDOW_BACKENDS,
    SQL_BACKENDS,
    SQL_WINDOW_BACKENDS,
    Harness,
    document_write,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    mode_rows_of,
    per_mode_backend,  # noqa: F401  (fixture "backend")
)
from tests.conftest import Backend, unique_name

token_mode = pytest.mark.parametrize("backend", SQL_BACKENDS + DOCUMENT_BACKENDS, indirect=True)
window_modes = pytest.mark.parametrize(
    "backend", SQL_WINDOW_BACKENDS + DOCUMENT_WINDOW_BACKENDS, indirect=True
)
DAY = 86_400.0


def store_endpoints(harness: Harness) -> set[str]:
    """The endpoints whose rows are off tables (every one, with these backends)."""
    return {name for name, e in harness.app.endpoints.items() if e.store != "table"}


def crash_before_the_first_commit(harness: Harness, mode: Mode) -> FaultPlan:
    """A crash just before the first message's commit: in SQL its transaction; in a document
    store the write of the partition's document that commits (token mode writes the O(m)
    record first, R3, so its second write)."""
    store = harness.app.get(next(iter(harness.app.endpoints))).store
    if store == "postgres":
        return fault_at_first("sql.transact", Fault.CRASH_BEFORE)
    writes: list[Operation] = []
    commit = 2 if mode == "token" else 1

    def plan(operation: Operation) -> Fault | None:
        if len(writes) >= commit or not document_write(operation, store):
            return None
        writes.append(operation)
        return Fault.CRASH_BEFORE if len(writes) == commit else None

    return plan


async def cleanup(harness: Harness, later: float, **settings: float) -> CleanupReport:
    clock = harness.config.clock
    report = await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: clock() + later),
        settings=CleanupSettings(
            budget_seconds=600,
            page_size=2,
            checkpoint_table=unique_name("cleanup"),
            **settings,  # type: ignore[arg-type]
        ),
    )
    assert report.complete
    return report


async def start(backend: Backend, mode: Mode = "token") -> tuple[Harness, FlowNames]:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, mode=mode))
    assert store_endpoints(harness) == set(names.all)
    for order in ("o1", "o2", "o3"):
        await harness.setup_bus.client().send(
            PlaceOrder(order_id=order, amount=5), to=names.orders, idempotency_key=order
        )
    return harness, names


@token_mode
async def test_one_run_after_quiet_leaves_no_dedup_data(backend: Backend) -> None:
    harness, names = await start(backend)
    harness.instrumentation.plan = crash_before_the_first_commit(harness, "token")
    await harness.run_until_quiet()
    assert harness.crashes == 1
    assert await harness.tokens()  # the crashed round's tokens were never committed

    report = await cleanup(harness, later=3600)

    assert await harness.tokens() == []
    for endpoint in names.all:
        assert await harness.outbox_records(endpoint) == []
    assert report.to_dict()["removed"]["abandoned_tokens"] >= 1
    assert sorted(await harness.applied(names.orders)) == sorted(
        await harness.audit_ids(names.orders)
    )
    assert len(await harness.applied(names.orders)) == 3


@token_mode
async def test_a_committed_token_not_yet_consumed_is_kept(backend: Backend) -> None:
    harness, names = await start(backend)
    for message in await harness.raw.queue(names.orders).receive(32, visibility_timeout=30):
        await harness.deliver(names.orders, message)  # only orders runs; its outputs wait
    waiting = await harness.tokens()
    assert waiting

    await cleanup(harness, later=3600)

    assert await harness.tokens() == waiting
    assert len(await harness.outbox_records(names.orders)) == 3  # outputs still in flight
    await harness.run_until_quiet()
    assert len(await harness.applied(names.payments)) == 3
    assert len(await harness.applied(names.loyalty)) == 3


@token_mode
async def test_audit_rows_expire_in_the_same_job(backend: Backend) -> None:
    harness, names = await start(backend)
    await harness.run_until_quiet()

    kept = await cleanup(harness, later=3600, audit_retention_seconds=86_400)
    assert len(await harness.audit_ids(names.orders)) == 3
    expired = await cleanup(harness, later=2 * 86_400, audit_retention_seconds=86_400)

    assert kept.to_dict()["removed"].get("audit_rows", 0) == 0
    assert expired.to_dict()["removed"]["audit_rows"] == 3 + 3 + 3 + 6
    for endpoint in names.all:
        assert await harness.audit_ids(endpoint) == []


async def window_rows(harness: Harness) -> tuple[int, int]:
    """(dedup records, state streams) over every endpoint: processed rows, state-stream
    index rows and entity-outbox entries, all read in the endpoints' store."""
    records = streams = 0
    for endpoint in harness.app.endpoints:
        async for entity in mode_rows_of(harness.rows(endpoint).rows()):
            if entity.row_key.startswith((PROCESSED_PREFIX, INDEX_PREFIX)):
                records += 1
            elif entity.row_key == STATE_ROW and "outbox_parts" in entity.properties:
                records += len(StateEntity.from_entity(entity).entries)
            if entity.row_key == STATE_ROW:
                streams += 1
    return records, streams


@window_modes
async def test_window_rows_in_the_store_judge_tokens_and_expire_after_their_window(
    backend: Backend, mode: Mode
) -> None:
    harness, names = await start(backend, mode)
    # A second message of partition o1: its stream gets a version the truncation can remove.
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o1", amount=6), to=names.orders, idempotency_key="o1-again"
    )
    harness.instrumentation.plan = crash_before_the_first_commit(harness, mode)
    await harness.run_until_quiet()
    assert harness.crashes == 1
    assert await harness.tokens()  # the crashed round's tokens were never committed
    records, streams = await window_rows(harness)
    assert records > streams
    kind = {
        "processed_messages": "processed_rows",
        "state_based": "state_versions",
        "entity_outbox": "entity_outbox_entries",
    }[mode]

    within = await cleanup(harness, later=3600)

    assert await harness.tokens() == []  # judged by the rows in the store: not committed
    assert within.to_dict()["removed"].get(kind, 0) == 0
    assert await window_rows(harness) == (records, streams)

    past = await cleanup(harness, later=8 * DAY)

    assert past.to_dict()["removed"][kind] > 0
    left, _ = await window_rows(harness)
    # A state stream keeps its latest version (and that version's index row).
    assert left == (streams if mode == "state_based" else 0)
    assert len(await harness.applied(names.orders)) == 4
    assert sorted(await harness.applied(names.orders)) == sorted(
        await harness.audit_ids(names.orders)
    )


@window_modes
async def test_a_committed_token_of_a_window_mode_off_tables_is_kept(
    backend: Backend, mode: Mode
) -> None:
    harness, names = await start(backend, mode)
    for message in await harness.raw.queue(names.orders).receive(32, visibility_timeout=30):
        await harness.deliver(names.orders, message)  # only orders runs; its outputs wait
    waiting = await harness.tokens()
    assert waiting

    await cleanup(harness, later=3600)

    assert await harness.tokens() == waiting
    await harness.run_until_quiet()
    assert len(await harness.applied(names.payments)) == 3
    assert len(await harness.applied(names.loyalty)) == 3
