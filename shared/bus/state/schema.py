"""The PostgreSQL schema of endpoint state, as versioned migrations.

``migrate`` applies, in order and in one transaction, the migrations a database has not
recorded yet; an advisory lock keeps two provisioning runs from applying one twice. A
migration is never edited once released: a change is a new entry at the end.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "bus"
_LOCK_KEY = 0x6275735F736368  # "bus_sch": serialises concurrent migrations


def _iso(column: str) -> str:
    """A timestamptz column as the ISO text ``datetime.fromisoformat`` reads back, in UTC."""
    return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00'"""


MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "state, outbox and audit tables",
        f"""
        CREATE SEQUENCE {SCHEMA}.row_version;
        CREATE TABLE {SCHEMA}.state (
            endpoint text NOT NULL,
            partition_key text NOT NULL,
            type text NOT NULL,
            data jsonb NOT NULL,
            version bigint NOT NULL,
            PRIMARY KEY (endpoint, partition_key)
        );
        CREATE TABLE {SCHEMA}.outbox (
            endpoint text NOT NULL,
            partition_key text NOT NULL,
            message_id text NOT NULL,
            claim text NOT NULL,
            status text NOT NULL CHECK (status IN ('claimed', 'committed')),
            incoming_token text NOT NULL,
            started_at timestamptz NOT NULL,
            committed_at timestamptz,
            outgoing jsonb NOT NULL,
            abandoned jsonb NOT NULL,
            version bigint NOT NULL,
            PRIMARY KEY (endpoint, partition_key, message_id)
        );
        CREATE TABLE {SCHEMA}.audit (
            endpoint text NOT NULL,
            partition_key text NOT NULL,
            message_id text NOT NULL,
            message_type text NOT NULL,
            source text NOT NULL,
            correlation_id text NOT NULL,
            causation_id text NOT NULL,
            sent_at timestamptz NOT NULL,
            processed_at timestamptz NOT NULL,
            mode text NOT NULL,
            caused jsonb NOT NULL,
            PRIMARY KEY (endpoint, partition_key, message_id)
        );
        CREATE INDEX audit_processed_at ON {SCHEMA}.audit (endpoint, processed_at);
        """,
    ),
    (
        2,
        "rows of the window modes",
        # Processed-message records, state streams and their message index, entity-outbox
        # state rows: keyed as in the endpoint's table, typed properties kept as JSON text
        # (text, not jsonb, so that every string a table property holds is accepted).
        f"""
        CREATE TABLE {SCHEMA}.mode_rows (
            endpoint text NOT NULL,
            partition_key text COLLATE "C" NOT NULL,
            row_key text COLLATE "C" NOT NULL,
            properties text NOT NULL,
            version bigint NOT NULL,
            PRIMARY KEY (endpoint, partition_key, row_key)
        );
        """,
    ),
    (
        3,
        "every row in mode_rows",
        # Token mode's state, O(m) and audit rows move into mode_rows in the entity layout of
        # the endpoint's table (``shared.bus.records``: ``STATE_ROW``, ``outbox|{m}``,
        # ``audit|{m}``), so that one interface serves every mode and store. Each state and
        # O(m) row keeps its version (a round that read it still commits, or fails, as
        # before); audit rows had none and draw one. Times are ISO text in UTC, as
        # ``properties.encode_properties`` writes them. The old tables are dropped, so
        # that an instance of the previous version still running fails loudly on them
        # rather than writing rows nobody reads any more. A token-mode state row that meets
        # a window mode's row of the same key stops the migration (nothing is applied).
        f"""
        INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, properties, version)
        SELECT endpoint, partition_key, 'state',
            jsonb_build_object(
                'type', jsonb_build_array('str', type),
                'data', jsonb_build_array('str', data::text)
            )::text,
            version
        FROM {SCHEMA}.state;
        INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, properties, version)
        SELECT endpoint, partition_key, 'outbox|' || message_id,
            (jsonb_build_object(
                'claim', jsonb_build_array('str', claim),
                'status', jsonb_build_array('str', status),
                'incoming', jsonb_build_array('str', incoming_token),
                'started_at', jsonb_build_array('datetime', {_iso("started_at")}),
                'outgoing', jsonb_build_array('str', outgoing::text),
                'abandoned', jsonb_build_array('str', abandoned::text)
            ) || CASE WHEN committed_at IS NULL THEN '{{}}'::jsonb ELSE jsonb_build_object(
                'committed_at', jsonb_build_array('datetime', {_iso("committed_at")})
            ) END)::text,
            version
        FROM {SCHEMA}.outbox;
        INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, properties, version)
        SELECT endpoint, partition_key, 'audit|' || message_id,
            jsonb_build_object(
                'endpoint', jsonb_build_array('str', endpoint),
                'message_id', jsonb_build_array('str', message_id),
                'message_type', jsonb_build_array('str', message_type),
                'source', jsonb_build_array('str', source),
                'correlation_id', jsonb_build_array('str', correlation_id),
                'causation_id', jsonb_build_array('str', causation_id),
                'sent_at', jsonb_build_array('datetime', {_iso("sent_at")}),
                'processed_at', jsonb_build_array('datetime', {_iso("processed_at")}),
                'mode', jsonb_build_array('str', mode),
                'caused', jsonb_build_array('str', caused::text)
            )::text,
            nextval('{SCHEMA}.row_version')
        FROM {SCHEMA}.audit
        ORDER BY endpoint, partition_key, message_id;
        DROP TABLE {SCHEMA}.audit, {SCHEMA}.outbox, {SCHEMA}.state;
        """,
    ),
)


async def migrate(connection: Any) -> list[int]:
    """Bring the database to the latest schema; returns the versions applied now."""
    applied_now: list[int] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        # CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema
        # exists; an app role granted only its schema (infra/app/postgres-app-role.sql) has not.
        if await connection.fetchval("SELECT to_regnamespace($1)", SCHEMA) is None:
            await connection.execute(f"CREATE SCHEMA {SCHEMA}")
        await connection.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations ("
            "version int PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        rows = await connection.fetch(f"SELECT version FROM {SCHEMA}.migrations")
        done = {r["version"] for r in rows}
        for version, description, sql in MIGRATIONS:
            if version in done:
                continue
            await connection.execute(sql)
            await connection.execute(
                f"INSERT INTO {SCHEMA}.migrations (version, description) VALUES ($1, $2)",
                version,
                description,
            )
            applied_now.append(version)
    return applied_now


async def schema_version(connection: Any) -> int:
    """The latest migration applied, 0 on a database the bus has never provisioned."""
    exists = await connection.fetchval("SELECT to_regclass($1)", f"{SCHEMA}.migrations")
    if exists is None:
        return 0
    latest = await connection.fetchval(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.migrations")
    return int(latest)
