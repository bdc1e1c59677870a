"""Damaged rows in PostgreSQL, written with plain SQL as anyone with access to the database
could: the cleanup skips each one with its reason (table, key, what is wrong), counts it as a
bad row, keeps it, and cleans every other row of its page, pass after pass.

Every row of every mode is in ``bus.mode_rows`` (token mode's O(m) since migration 3), which
keeps a row's properties as text, so anything can be stored there: text that is not JSON, JSON
of the wrong shape, an unknown or wrong-valued type tag, and well-encoded properties that are
missing or of the wrong type for the mode. The window modes' retention is shared by every
store, so the last test gives an endpoint's table and the in-memory model of PostgreSQL rows
of the wrong type as well.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import asyncpg
import pytest

from shared.bus.app import Mode
from shared.bus.modes.processed_table import PROCESSED_PREFIX
from shared.bus.modes.state_based import index_row, version_row
from shared.bus.origin import Origin
from shared.bus.outgoing import ORIGIN_METADATA
from shared.bus.records import OUTBOX_PREFIX, STATE_ROW, outbox_row
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.bus.state.properties import decode_properties, encode_properties
from shared.bus.state.schema import SCHEMA
from shared.bus.state.stores import PostgresDatabase
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.stores.instrumented import Fault, FaultPlan, Operation
from shared.stores.table import Entity, TableValue
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import (
    Harness,
    SqlBackend,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend")
)
from tests.conftest import Backend, unique_name

DAY = 86_400.0
OLD = "2020-01-01T00:00:00+00:00"
on_postgres = [pytest.mark.azurite, pytest.mark.postgres]


async def flow(backend: Backend, mode: Mode) -> tuple[Harness, FlowNames]:
    """Orders o1, o2, o3 and o1 again, processed to the end: every row they leave is
    removable once their window is past."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, mode=mode))
    for order, key in (("o1", "o1"), ("o2", "o2"), ("o3", "o3"), ("o1", "o1-again")):
        await harness.setup_bus.client().send(
            PlaceOrder(order_id=order, amount=5), to=names.orders, idempotency_key=key
        )
    await harness.run_until_quiet()
    return harness, names


async def cleanup(harness: Harness, later: float) -> CleanupReport:
    """One pass, with pages large enough that every row of a task is on one page."""
    clock = harness.config.clock
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: clock() + later),
        settings=CleanupSettings(
            budget_seconds=600, page_size=100, checkpoint_table=unique_name("cleanup")
        ),
    )


def task(report: CleanupReport, task_id: str) -> TaskReport:
    [found] = [t for t in report.tasks if t.task == task_id]
    return found


@contextlib.asynccontextmanager
async def database(backend: Backend, endpoint: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own to the endpoint's database, as an operator would open."""
    assert isinstance(backend, SqlBackend)
    assert isinstance(backend.sql, PostgresDatabase)
    connection = await asyncpg.connect(backend.sql.settings.url_for(endpoint))
    try:
        yield connection
    finally:
        await connection.close()


def damaged_outbox_rows() -> dict[str, str]:
    """O(m) rows the bus cannot read, by message id: their stored properties. Partitions sort
    between the good rows' (o1, o2, o3)."""
    signal = '{"token": 1}'

    def outbox(status: str, outgoing: str, abandoned: str, committed_at: str | None) -> str:
        properties: dict[str, TableValue] = {
            "claim": "c",
            "status": status,
            "incoming": "none",
            "started_at": datetime.fromisoformat(OLD),
            "outgoing": outgoing,
            "abandoned": abandoned,
        }
        if committed_at is not None:
            properties["committed_at"] = datetime.fromisoformat(committed_at)
        return encode_properties(properties)

    return {
        "outgoing-not-a-list": outbox("committed", '{"not": "a list"}', "[]", OLD),
        "outgoing-missing-fields": outbox("committed", f"[{signal}]", "[]", OLD),
        "outgoing-a-number": outbox("committed", "[1]", "[]", OLD),
        "outgoing-not-json": outbox("committed", "not json", "[]", OLD),
        "abandoned-a-number": outbox("claimed", "[]", "7", None),
        "committed-without-committed-at": outbox("committed", "[]", "[]", None),
        "properties-not-json": "not json {",
    }


@pytest.mark.parametrize(
    "backend",
    [pytest.param(("postgres", "token"), id="postgres-token", marks=on_postgres)],
    indirect=True,
)
async def test_damaged_outbox_rows_are_skipped_and_the_rest_of_their_page_is_cleaned(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    harness, names = await flow(backend, "token")
    damaged = damaged_outbox_rows()
    partitions = ["o1-x", "o2-x", "o2-y", "o2-z", "o3-x", "o3-y", "o3-z"]
    async with database(backend, names.orders) as sql:
        for partition, (message_id, properties) in zip(partitions, damaged.items(), strict=True):
            await sql.execute(
                f"INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, "
                f"properties, version) VALUES ($1, $2, $3, $4, nextval('{SCHEMA}.row_version'))",
                names.orders,
                partition,
                outbox_row(message_id),
                properties,
            )
        good = await sql.fetchval(
            f"SELECT count(*) FROM {SCHEMA}.mode_rows WHERE endpoint = $1 "
            "AND partition_key IN ('o1', 'o2', 'o3') AND starts_with(row_key, $2)",
            names.orders,
            OUTBOX_PREFIX,
        )
        assert good == 4  # the flow's O(m), all on the same page as the damaged ones

        for attempt in (1, 2):  # the second pass meets the same rows and does the same
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="shared.cleanup.tasks"):
                report = await cleanup(harness, later=3600)

            outbox = task(report, f"outbox.{names.orders}")
            assert report.complete
            assert outbox.skipped is None
            assert outbox.removed["outbox_records"] == (4 if attempt == 1 else 0)
            assert outbox.kept["bad_row"] == len(damaged)
            assert report.kept()["bad_row"] == len(damaged)  # the pass's summary counts them
            for partition, message_id in zip(partitions, damaged, strict=True):
                row_key = outbox_row(message_id)
                where = f"{SCHEMA}.mode_rows of {names.orders} {partition!r}/{row_key!r}"
                assert [b for b in outbox.bad_rows if b.startswith(f"{where}: ")]
                assert f"skipping bad record {where}: " in caplog.text
            assert any("a record's signals" in b for b in outbox.bad_rows)  # a CorruptRecord
            assert any("TypeError" in b for b in outbox.bad_rows)
            assert any("without committed_at" in b for b in outbox.bad_rows)
            assert any("CorruptRecord" in b for b in outbox.bad_rows)
            left = await sql.fetch(
                f"SELECT row_key FROM {SCHEMA}.mode_rows WHERE endpoint = $1 "
                "AND starts_with(row_key, $2)",
                names.orders,
                OUTBOX_PREFIX,
            )
            assert sorted(r["row_key"] for r in left) == sorted(map(outbox_row, damaged))


def damaged_mode_rows(mode: Mode) -> dict[tuple[str, str], str]:
    """Rows of ``bus.mode_rows`` the mode cannot read, by (partition, row key): their stored
    properties text. Partitions sort between the good rows' (o1, o2, o3)."""

    def key(partition: str) -> tuple[str, str]:
        if mode == "processed_messages":
            return partition, f"{PROCESSED_PREFIX}{partition}"
        return partition, version_row(1) if mode == "state_based" else STATE_ROW

    wrong_type = {
        "processed_messages": '{"committed_at": ["str", "yesterday"], "incoming": ["str", "t"],'
        ' "outgoing": ["str", "[]"], "abandoned": ["str", "[]"]}',
        "state_based": '{"committed_at": ["str", "yesterday"], "now": ["str", "today"]}',
        "entity_outbox": '{"outbox_parts": ["int", 1], "outbox_0": ["str", "not json"],'
        ' "type": ["str", "T"], "data": ["str", "{}"]}',
    }[mode]
    missing = {
        "processed_messages": f'{{"committed_at": ["datetime", "{OLD}"]}}',
        "state_based": f'{{"committed_at": ["datetime", "{OLD}"], "now": ["datetime", "{OLD}"]}}',
        "entity_outbox": '{"outbox_parts": ["int", 1], "type": ["str", "T"],'
        ' "data": ["str", "{}"]}',
    }[mode]
    return {
        key("o1-not-json"): "not json {",
        key("o1-not-an-object"): '["a", "list"]',
        key("o2-unknown-tag"): '{"committed_at": ["moment", 1]}',
        key("o2-bad-datetime"): '{"committed_at": ["datetime", "yesterday"]}',
        key("o3-wrong-type"): wrong_type,
        key("o3-missing-field"): missing,
    }


REMOVED = {
    "processed_messages": ("processed_rows", 4),  # every processed row
    "state_based": ("state_versions", 1),  # o1's first version: o1 again followed it
    "entity_outbox": ("entity_outbox_entries", 4),  # every entry
}


@pytest.mark.parametrize(
    "backend",
    [pytest.param(("postgres", m), id=f"postgres-{m}", marks=on_postgres) for m in REMOVED],
    indirect=True,
)
async def test_damaged_mode_rows_are_skipped_and_the_rest_of_their_page_expires(
    backend: Backend, mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    harness, names = await flow(backend, mode)
    damaged = damaged_mode_rows(mode)
    kind, removable = REMOVED[mode]
    async with database(backend, names.orders) as sql:
        for (partition, row_key), properties in damaged.items():
            await sql.execute(
                f"INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, "
                f"properties, version) VALUES ($1, $2, $3, $4, nextval('{SCHEMA}.row_version'))",
                names.orders,
                partition,
                row_key,
                properties,
            )

        for attempt in (1, 2):  # the second pass meets the same rows and does the same
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="shared.cleanup.tasks"):
                report = await cleanup(harness, later=8 * DAY)

            expiry = task(report, f"{kind}.{names.orders}")
            assert report.complete
            assert expiry.skipped is None
            assert expiry.removed[kind] == (removable if attempt == 1 else 0)
            assert expiry.kept["bad_row"] == len(damaged)
            assert report.kept()["bad_row"] == len(damaged)
            for partition, row_key in damaged:
                where = f"{SCHEMA}.mode_rows of {names.orders} {partition!r}/{row_key!r}"
                [line] = [b for b in expiry.bad_rows if b.startswith(f"{where}: ")]
                assert f"skipping bad record {where}: " in caplog.text
                if partition.startswith(("o1-", "o2-")):  # the properties text itself
                    assert ": CorruptRecord: malformed row properties: " in line
            stored = {
                (r["partition_key"], r["row_key"]): r["properties"]
                for r in await sql.fetch(
                    f"SELECT partition_key, row_key, properties FROM {SCHEMA}.mode_rows "
                    "WHERE endpoint = $1 AND partition_key LIKE 'o_-%'",
                    names.orders,
                )
            }
            assert stored == damaged  # kept as they were


def mistyped_mode_rows(mode: Mode) -> dict[tuple[str, str], dict[str, TableValue]]:
    """Rows of well-typed storage whose values the mode cannot read, by (partition, row key):
    what a table or the in-memory model can hold (their properties are never text to parse)."""
    old = datetime(2020, 1, 1, tzinfo=UTC)
    if mode == "processed_messages":
        return {
            ("o1-wrong-type", f"{PROCESSED_PREFIX}a"): {
                "committed_at": "yesterday",
                "incoming": "t",
                "outgoing": "[]",
                "abandoned": "[]",
            },
            ("o2-missing-field", f"{PROCESSED_PREFIX}b"): {"committed_at": old},
            ("o3-not-json", f"{PROCESSED_PREFIX}c"): {
                "committed_at": old,
                "incoming": "t",
                "outgoing": "not json",
                "abandoned": "[]",
            },
        }
    if mode == "state_based":
        return {
            ("o1-wrong-type", version_row(1)): {"committed_at": "yesterday", "now": old},
            ("o2-missing-field", version_row(1)): {"committed_at": old, "now": old},
        }
    return {
        ("o1-missing-part", STATE_ROW): {"outbox_parts": 1, "type": "T", "data": "{}"},
        ("o2-not-json", STATE_ROW): {
            "outbox_parts": 1,
            "outbox_0": "not json",
            "type": "T",
            "data": "{}",
        },
    }


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param((store, m), id=f"{store}-{m}")
        for store in ("memory", "memory-sql")
        for m in REMOVED
    ],
    indirect=True,
)
async def test_mistyped_window_rows_on_a_table_and_in_the_model_are_skipped_too(
    backend: Backend, mode: Mode
) -> None:
    """The window modes' retention is the same code on every store: a row whose values it
    cannot read is reported and kept, in the endpoint's table as in the model of PostgreSQL."""
    harness, names = await flow(backend, mode)
    damaged = mistyped_mode_rows(mode)
    kind, removable = REMOVED[mode]
    model = backend.sql if isinstance(backend.sql, MemorySqlDatabase) else None
    for (partition, row_key), properties in damaged.items():
        entity = Entity(partition, row_key, properties)
        if model is None:
            await harness.raw.table(names.orders).insert(entity)
        else:  # written into the model's rows directly, as SQL would on the server
            model.rows[names.orders, partition, row_key] = replace(
                entity, etag=model.next_version()
            )
    table = f"{SCHEMA}.mode_rows of {names.orders}" if model else names.orders

    for attempt in (1, 2):
        report = await cleanup(harness, later=8 * DAY)

        expiry = task(report, f"{kind}.{names.orders}")
        assert report.complete
        assert expiry.skipped is None
        assert expiry.removed[kind] == (removable if attempt == 1 else 0)
        assert expiry.kept["bad_row"] == len(damaged)
        for partition, row_key in damaged:
            where = f"{table} {partition!r}/{row_key!r}: "
            assert [b for b in expiry.bad_rows if b.startswith(where)]
        for (partition, row_key), properties in damaged.items():
            [kept] = (await harness.rows(names.orders).rows().read(partition, [row_key])).values()
            assert kept.properties == properties


def crash_each_partitions_first_commit(endpoint: str) -> FaultPlan:
    """Crash before the first commit of every partition of ``endpoint``: each leaves the
    tokens of a round that never committed, whose origin is that message's row."""
    crashed: set[str] = set()

    def plan(op: Operation) -> Fault | None:
        if op.kind != "sql.transact" or not op.target.startswith(f"{endpoint}/"):
            return None
        if op.target in crashed:
            return None
        crashed.add(op.target)
        return Fault.CRASH_BEFORE

    return plan


@pytest.mark.parametrize(
    "backend",
    [pytest.param(("postgres", "processed_messages"), id="postgres-processed", marks=on_postgres)],
    indirect=True,
)
async def test_tokens_whose_origin_row_is_damaged_are_kept_and_the_others_judged(
    backend: Backend, mode: Mode
) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, mode=mode))
    harness.instrumentation.plan = crash_each_partitions_first_commit(names.orders)
    for order in ("o1", "o2", "o3"):
        await harness.setup_bus.client().send(
            PlaceOrder(order_id=order, amount=5), to=names.orders, idempotency_key=order
        )
    await harness.run_until_quiet()
    assert harness.crashes == 3
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    abandoned = {
        blob.name: Origin.decode(blob.metadata[ORIGIN_METADATA])
        async for blob in tokens.list(f"{names.orders}/")
    }
    damaged = [n for n, o in abandoned.items() if o.partition_key == "o2"]
    assert damaged
    assert len(abandoned) > len(damaged)  # o1's and o3's are on the same page
    [origin] = {abandoned[n] for n in damaged}
    async with database(backend, names.orders) as sql:
        changed = await sql.execute(
            f"UPDATE {SCHEMA}.mode_rows SET properties = 'not json {{' "
            "WHERE endpoint = $1 AND partition_key = $2 AND row_key = $3",
            names.orders,
            origin.partition_key,
            origin.row_key,
        )
        assert changed == "UPDATE 1"

    for attempt in (1, 2):
        report = await cleanup(harness, later=3600)

        swept = task(report, "tokens")
        assert report.complete
        assert swept.skipped is None
        assert swept.removed["abandoned_tokens"] == (len(abandoned) - len(damaged)) * (attempt == 1)
        assert swept.kept["bad_row"] == len(damaged)
        where = f"{SCHEMA}.mode_rows of {names.orders} 'o2'/{origin.row_key!r}: CorruptRecord"
        assert len([b for b in swept.bad_rows if f" of {where}" in b]) == len(damaged)
        assert sorted(await harness.tokens()) == sorted(damaged)


@pytest.mark.parametrize(
    "backend",
    [pytest.param(("postgres", "state_based"), id="postgres-state_based", marks=on_postgres)],
    indirect=True,
)
async def test_a_version_whose_index_row_is_damaged_stays_and_the_others_are_truncated(
    backend: Backend, mode: Mode
) -> None:
    harness, names = await flow(backend, mode)
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o2", amount=6), to=names.orders, idempotency_key="o2-again"
    )
    await harness.run_until_quiet()  # o1 and o2 have two versions each: each first may go
    async with database(backend, names.orders) as sql:
        first = decode_properties(
            await sql.fetchval(
                f"SELECT properties FROM {SCHEMA}.mode_rows "
                "WHERE endpoint = $1 AND partition_key = 'o1' AND row_key = $2",
                names.orders,
                version_row(1),
            )
        )
        index = index_row(str(first["message_id"]))
        await sql.execute(
            f'UPDATE {SCHEMA}.mode_rows SET properties = \'{{"version": ["int", "one"]}}\' '
            "WHERE endpoint = $1 AND partition_key = 'o1' AND row_key = $2",
            names.orders,
            index,
        )

        for attempt in (1, 2):
            report = await cleanup(harness, later=8 * DAY)

            expiry = task(report, f"state_versions.{names.orders}")
            assert report.complete
            assert expiry.skipped is None
            assert expiry.removed["state_versions"] == (1 if attempt == 1 else 0)  # o2's first
            assert expiry.kept["bad_row"] == 1
            [line] = expiry.bad_rows
            assert line.startswith(f"{SCHEMA}.mode_rows of {names.orders} 'o1'/{index!r}: ")
            left = {
                (r["partition_key"], r["row_key"])
                for r in await sql.fetch(
                    f"SELECT partition_key, row_key FROM {SCHEMA}.mode_rows WHERE endpoint = $1",
                    names.orders,
                )
            }
            assert {("o1", version_row(1)), ("o1", index), ("o1", version_row(2))} <= left
            assert ("o2", version_row(1)) not in left
            assert ("o2", version_row(2)) in left
