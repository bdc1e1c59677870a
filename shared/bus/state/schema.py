"""The PostgreSQL schema of endpoint state, as versioned migrations.

``migrate`` applies, in order and in one transaction, the migrations a database has not
recorded yet; an advisory lock keeps two provisioning runs from applying one twice. A
migration is never edited once released: a change is a new entry at the end.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "bus"
_LOCK_KEY = 0x6275735F736368  # "bus_sch": serialises concurrent migrations

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
