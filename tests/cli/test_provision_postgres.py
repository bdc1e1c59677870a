"""``bus provision`` creates the PostgreSQL schema of an app's ``store="postgres"``
endpoints, as versioned migrations that a second run leaves alone."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from shared.bus import BusApp
from shared.bus.state.schema import MIGRATIONS, SCHEMA
from shared.cli.commands import provision_command
from shared.resources import resources_json
from shared.runtime import Worker
from shared.settings import Settings
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import unique_name

pytestmark = pytest.mark.postgres


async def fresh_database(server: str) -> str:
    """An empty database on the session's server, so the schema starts absent."""
    name = unique_name("db")
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(f"CREATE DATABASE {name}")
    finally:
        await connection.close()
    return server.rsplit("/", 1)[0] + f"/{name}"


async def test_provision_applies_the_migrations_once(
    postgres: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = await fresh_database(postgres)
    app = BusApp()
    app.endpoint("billing", store="postgres")
    app.endpoint("orders")
    worker = Worker(app, Settings({"BUS_POSTGRES_URL": url}, {}), MemoryStorageAccount())
    resources = tmp_path / "resources.json"
    resources.write_text(resources_json(worker.resources))

    try:
        assert await provision_command(worker, resources) == 0
        first = capsys.readouterr().out
        assert await provision_command(worker, resources) == 0
        second = capsys.readouterr().out
    finally:
        await worker.close()

    latest = MIGRATIONS[-1][0]
    assert f"bus schema at version {latest} (applied [1" in first
    assert f"bus schema at version {latest} (up to date)" in second
    assert "@" not in first + second  # the URL's user (or password) is never printed
    connection = await asyncpg.connect(url)
    try:
        tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", SCHEMA
        )
    finally:
        await connection.close()
    # Migration 3 moved token mode's tables into mode_rows: every row of every mode is there.
    assert {r["table_name"] for r in tables} == {"migrations", "mode_rows"}


async def test_provision_brings_a_database_of_an_earlier_version_up_to_date(
    postgres: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database provisioned before the window modes could keep rows in PostgreSQL (schema
    version 1) gets only the later migrations, and keeps its rows."""
    url = await fresh_database(postgres)
    connection = await asyncpg.connect(url)
    try:
        version, description, sql = MIGRATIONS[0]
        await connection.execute(f"CREATE SCHEMA {SCHEMA}")
        await connection.execute(
            f"CREATE TABLE {SCHEMA}.migrations (version int PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await connection.execute(sql)
        await connection.execute(
            f"INSERT INTO {SCHEMA}.migrations (version, description) VALUES ($1, $2)",
            version,
            description,
        )
        await connection.execute(
            f"INSERT INTO {SCHEMA}.state VALUES ('ledger', 'p1', 'Ledger', '{{}}', 1)"
        )
    finally:
        await connection.close()
    app = BusApp()
    app.endpoint("ledger", mode="processed_messages", store="postgres")
    worker = Worker(app, Settings({"BUS_POSTGRES_URL": url}, {}), MemoryStorageAccount())
    resources = tmp_path / "resources.json"
    resources.write_text(resources_json(worker.resources))

    try:
        assert await provision_command(worker, resources) == 0
    finally:
        await worker.close()

    later = [v for v, _, _ in MIGRATIONS[1:]]
    assert f"(applied {later})" in capsys.readouterr().out
    connection = await asyncpg.connect(url)
    try:
        # The state row moved into mode_rows (migration 3), keeping its version.
        moved = await connection.fetch(
            f"SELECT endpoint, partition_key, row_key, version FROM {SCHEMA}.mode_rows"
        )
        assert [tuple(r) for r in moved] == [("ledger", "p1", "state", 1)]
    finally:
        await connection.close()


async def test_provision_names_host_port_and_database_only(
    postgres: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user and password given as URL parameters (a form libpq takes) are never printed:
    ``bus provision`` says which server and database, nothing else of the URL."""
    url = await fresh_database(postgres)
    parts = urlsplit(url)
    secret = "not-a-real-password-Zx81"
    moved = (
        f"postgresql://{parts.hostname}:{parts.port}{parts.path}"
        f"?user={parts.username}&password={secret}&application_name=provisioning"
    )
    app = BusApp()
    app.endpoint("billing", store="postgres")
    worker = Worker(app, Settings({"BUS_POSTGRES_URL": moved}, {}), MemoryStorageAccount())
    resources = tmp_path / "resources.json"
    resources.write_text(resources_json(worker.resources))
    try:
        assert await provision_command(worker, resources) == 0
    finally:
        await worker.close()
    out = capsys.readouterr()
    printed = out.out + out.err
    assert f"PostgreSQL {parts.hostname}:{parts.port}{parts.path}: bus schema" in printed
    for hidden in (secret, "password", "user=", f"{parts.username}@", "application_name"):
        assert hidden not in printed, hidden
