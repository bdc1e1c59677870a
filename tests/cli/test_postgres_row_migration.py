"""Migration 3 moves token mode's rows (``bus.state``, ``bus.outbox``, ``bus.audit``) into
``bus.mode_rows``: a database written by the previous version stays readable through the one
rows interface, with the same values, and every version it held still guards writes.

The rows are written here exactly as the previous version's code wrote them (its statements,
copied from ``shared/bus/state/postgres.py`` and ``postgres_rows.py`` before the move), on a
database that holds migrations 1 and 2 only."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest

from shared.bus.records import AuditRecord, OutboxRecord, OutgoingSignal, outbox_row
from shared.bus.state.base import EndpointState, StateWrite
from shared.bus.state.connection import PostgresSettings
from shared.bus.state.properties import encode_properties
from shared.bus.state.rows import EndpointRows
from shared.bus.state.schema import MIGRATIONS, SCHEMA, migrate, schema_version
from shared.bus.state.stores import PostgresDatabase
from shared.errors import PreconditionFailed, TransactionFailed
from shared.stores.table import Entity, Insert
from tests.cli.test_provision_postgres import fresh_database

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
T1 = datetime(2026, 3, 1, 14, 30, tzinfo=timezone(timedelta(hours=2)))  # 12:30 UTC
T2 = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)

SIGNAL = OutgoingSignal(
    destination="billing",
    message_id="out-1",
    attempt_id="a1",
    token="tokens/out-1",
    partition_key="c1",
    type="Charge",
    deliver_at=T2,
)
COMMITTED = OutboxRecord(
    "c1",
    "m1",
    claim="claim-1",
    incoming_token="tok/m1",
    started_at=T0,
    status="committed",
    committed_at=T1,
    outgoing=(SIGNAL,),
    abandoned=("lost-1",),
)
CLAIMED = OutboxRecord("c1", "m2", claim="claim-2", incoming_token="tok/m2", started_at=T0)
AUDIT = AuditRecord(
    partition_key="c1",
    endpoint="orders",
    message_id="m1",
    message_type="PlaceOrder",
    source="ingress",
    correlation_id="corr-1",
    causation_id=None,
    sent_at=T0,
    processed_at=T1,
    mode="token",
    caused=[{"id": "out-1", "type": "Charge"}],
)
WINDOW_ROW = Entity("w1", "processed|m9", {"committed_at": T1, "outgoing": "[]", "n": 3})


async def _at_version_2(url: str) -> None:
    """The schema as the previous version left it: migrations 1 and 2."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(f"CREATE SCHEMA {SCHEMA}")
        await connection.execute(
            f"CREATE TABLE {SCHEMA}.migrations (version int PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, description, sql in MIGRATIONS[:2]:
            await connection.execute(sql)
            await connection.execute(
                f"INSERT INTO {SCHEMA}.migrations (version, description) VALUES ($1, $2)",
                version,
                description,
            )
    finally:
        await connection.close()


async def _insert_outbox(c: asyncpg.Connection, endpoint: str, record: OutboxRecord) -> int:
    """The previous ``PostgresEndpointState.insert_outbox``."""
    version = await c.fetchval(
        f"INSERT INTO {SCHEMA}.outbox (endpoint, partition_key, message_id, claim, "
        "status, incoming_token, started_at, committed_at, outgoing, abandoned, version) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, "
        f"nextval('{SCHEMA}.row_version')) RETURNING version",
        endpoint,
        record.partition_key,
        record.message_id,
        record.claim,
        record.status,
        record.incoming_token,
        record.started_at,
        record.committed_at,
        json.dumps([o.model_dump() for o in record.outgoing]),
        json.dumps(list(record.abandoned)),
    )
    return int(version)


async def _write_as_before(url: str) -> dict[str, int]:
    """Rows of every kind, written by the previous version's statements; their versions."""
    c = await asyncpg.connect(url)
    try:
        versions = {"claimed": await _insert_outbox(c, "orders", CLAIMED)}
        claimed_m1 = await _insert_outbox(
            c, "orders", replace(COMMITTED, status="claimed", committed_at=None, outgoing=())
        )
        # The previous PostgresTransaction.commit: state inserted, O(m) committed, audit row.
        async with c.transaction():
            versions["state"] = await c.fetchval(
                f"INSERT INTO {SCHEMA}.state (endpoint, partition_key, type, data, version) "
                f"VALUES ($1, $2, $3, $4::jsonb, nextval('{SCHEMA}.row_version')) "
                "ON CONFLICT DO NOTHING RETURNING version",
                "orders",
                "c1",
                "Ledger",
                '{"total": 5, "items": ["a"]}',
            )
            versions["committed"] = await c.fetchval(
                f"UPDATE {SCHEMA}.outbox SET status = $4, committed_at = $5, "
                "outgoing = $6::jsonb, abandoned = $7::jsonb, "
                f"version = nextval('{SCHEMA}.row_version') "
                "WHERE endpoint = $1 AND partition_key = $2 AND message_id = $3 "
                "AND version = $8 RETURNING version",
                "orders",
                "c1",
                "m1",
                COMMITTED.status,
                COMMITTED.committed_at,
                json.dumps([o.model_dump() for o in COMMITTED.outgoing]),
                json.dumps(list(COMMITTED.abandoned)),
                claimed_m1,
            )
            await c.execute(
                f"INSERT INTO {SCHEMA}.audit (endpoint, partition_key, message_id, "
                "message_type, source, correlation_id, causation_id, sent_at, processed_at, "
                "mode, caused) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                "orders",
                AUDIT.partition_key,
                AUDIT.message_id,
                AUDIT.message_type,
                AUDIT.source,
                AUDIT.correlation_id,
                AUDIT.causation_id or "",
                AUDIT.sent_at,
                AUDIT.processed_at,
                AUDIT.mode,
                json.dumps(AUDIT.caused),
            )
        # The previous PostgresRows commit: a window mode's row in mode_rows.
        versions["window"] = await c.fetchval(
            f"INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, properties, "
            f"version) VALUES ($1, $2, $3, $4, nextval('{SCHEMA}.row_version')) "
            "ON CONFLICT DO NOTHING RETURNING version",
            "ledger",
            WINDOW_ROW.partition_key,
            WINDOW_ROW.row_key,
            encode_properties(WINDOW_ROW.properties),
        )
    finally:
        await c.close()
    return versions


async def test_rows_written_before_migration_3_read_back_and_stay_guarded(postgres: str) -> None:
    url = await fresh_database(postgres)
    await _at_version_2(url)
    versions = await _write_as_before(url)

    connection = await asyncpg.connect(url)
    try:
        assert await migrate(connection) == [3]
        assert await schema_version(connection) == 3
        left = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", SCHEMA
        )
        assert {r["table_name"] for r in left} == {"migrations", "mode_rows"}
    finally:
        await connection.close()

    database = PostgresDatabase(PostgresSettings(url=url))
    try:
        orders = database.endpoint_state("orders")
        snapshot = await orders.read("c1", "m1")
        assert snapshot.state is not None
        assert (snapshot.state.type, json.loads(snapshot.state.data)) == (
            "Ledger",
            {"total": 5, "items": ["a"]},
        )
        assert snapshot.state.version == str(versions["state"])
        # rows from before migration 3 were written before format versions: format 1
        assert snapshot.outbox == replace(COMMITTED, etag=str(versions["committed"]), format=1)
        assert snapshot.outbox.outgoing[0].deliver_at == T2
        claimed = (await orders.read("c1", "m2")).outbox
        assert claimed == replace(CLAIMED, etag=str(versions["claimed"]), format=1)
        assert [r.message_id async for r in orders.outbox_records()] == ["m1", "m2"]
        [audit] = [e async for e in orders.audit_entities()]
        assert dict(audit.properties) == dict(AUDIT.to_entity().properties)
        assert audit.row_key == AUDIT.to_entity().row_key
        assert [(s.partition_key, s.version) async for s in orders.states()] == [
            ("c1", str(versions["state"]))
        ]
        window = await database.endpoint_rows("ledger").get("w1", "processed|m9")
        assert dict(window.properties) == dict(WINDOW_ROW.properties)
        assert window.etag == str(versions["window"])

        await _versions_still_guard(orders, database.endpoint_rows("ledger"), versions)
    finally:
        await database.close()


async def _versions_still_guard(
    orders: EndpointState, ledger: EndpointRows, versions: dict[str, int]
) -> None:
    """A stale version fails; the version the old code handed out commits."""
    claimed = (await orders.read("c1", "m2")).outbox
    assert claimed is not None
    stale = StateWrite("c1", "Ledger", "{}", str(versions["state"] - 1))
    audit = replace(AUDIT, message_id="m2")
    with pytest.raises(TransactionFailed) as failed:
        async with orders.begin() as transaction:
            await transaction.commit(stale, claimed.committing([], [], T2), audit)
    assert failed.value.index == 0
    with pytest.raises(PreconditionFailed):
        await orders.delete_outbox(replace(claimed, etag=str(versions["committed"])))

    current = StateWrite("c1", "Ledger", '{"total": 6}', str(versions["state"]))
    async with orders.begin() as transaction:
        version = await transaction.commit(current, claimed.committing([], [], T2), audit)
    assert int(version) > max(versions.values())  # the sequence goes on past moved rows
    after = await orders.read("c1", "m2")
    assert after.outbox is not None
    assert after.outbox.committed
    assert after.state is not None
    assert json.loads(after.state.data) == {"total": 6}

    window = await ledger.get("w1", "processed|m9")
    with pytest.raises(PreconditionFailed):
        await ledger.update(replace(window, properties={"n": 4}), str(versions["claimed"]))
    await ledger.update(replace(window, properties={"n": 4}), str(versions["window"]))
    assert (await ledger.get("w1", "processed|m9"))["n"] == 4
    rows = orders.rows()
    with pytest.raises(TransactionFailed) as failed:  # the moved O(m) and audit keys hold
        async with rows.begin() as transaction:
            await transaction.commit([Insert(Entity("c1", outbox_row("m1"), {}))], AUDIT)
    assert failed.value.index == 0


async def test_a_listing_resumes_from_a_continuation_of_the_old_tables(postgres: str) -> None:
    """The cleanup's and the export's checkpoints hold continuations of the old outbox and
    audit listings (the key of the last row, by message id): after the move such a page
    resumes right after that row."""
    url = await fresh_database(postgres)
    await _at_version_2(url)
    connection = await asyncpg.connect(url)
    try:
        for partition, message in [("c1", "m1"), ("c1", "m2"), ("c2", "m0")]:
            record = OutboxRecord(partition, message, claim="k", incoming_token="t", started_at=T0)
            await _insert_outbox(connection, "orders", record)
        assert await migrate(connection) == [3]
    finally:
        await connection.close()

    database = PostgresDatabase(PostgresSettings(url=url))
    try:
        orders = database.endpoint_state("orders")
        old_continuation = json.dumps(["c1", "m1"])  # the previous page ended with c1/m1
        page, following = await orders.outbox_page(old_continuation, 10)
        assert [(r.partition_key, r.message_id) for r in page] == [("c1", "m2"), ("c2", "m0")]
        assert following is None
    finally:
        await database.close()
