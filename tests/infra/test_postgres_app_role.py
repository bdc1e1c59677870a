"""infra/app/postgres-app-role.sql on a real PostgreSQL server: the app identity ends up a
plain role that can provision and run the bus, and can do nothing an administrator can.

Azure's ``pgaadauth_create_principal_with_oid`` exists only on Azure; the test defines a
stand-in that creates a login role of that name, which is what the real one does besides
mapping the role to the Entra object id."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from provisioned import INFRA_DIR

from lab.local.postgres import find_binaries
from shared.bus.state.schema import SCHEMA, migrate, schema_version

ROLE_SQL = INFRA_DIR / "app" / "postgres-app-role.sql"
APP_ROLE = "id-func-bus-test"  # identity names carry hyphens: every use must quote them

STAND_IN = """
CREATE FUNCTION pgaadauth_create_principal_with_oid(
    role_name text, object_id text, object_type text, is_admin boolean, is_mfa boolean
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE ROLE %I LOGIN', role_name);
    RETURN 'Created role for ' || role_name;
END $$;
"""


def with_database(url: str, database: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + database


def with_user(url: str, user: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}@{rest.split('@', 1)[1]}"


def run_role_sql(url: str, database: str) -> subprocess.CompletedProcess[str]:
    """Run the SQL file as the deployment script does: psql with the same variables."""
    return subprocess.run(
        [
            str(find_binaries() / "psql"),
            "--no-psqlrc",
            "--quiet",
            "-d",
            with_database(url, database),
            "-v",
            f"app_role={APP_ROLE}",
            "-v",
            f"app_object_id={uuid.uuid4()}",
            "-v",
            f"database={database}",
            "-f",
            str(ROLE_SQL),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.fixture
async def database(postgres: str) -> AsyncIterator[str]:
    """A fresh database with the stand-in function, dropped afterwards with the role."""
    name = f"approle_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(postgres)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        fresh = await asyncpg.connect(with_database(postgres, name))
        try:
            await fresh.execute(STAND_IN)
        finally:
            await fresh.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{APP_ROLE}"')
        await admin.close()


async def test_the_app_role_provisions_and_runs_the_bus_without_admin_rights(
    postgres: str, database: str
) -> None:
    first = await asyncio.to_thread(run_role_sql, postgres, database)
    again = await asyncio.to_thread(run_role_sql, postgres, database)
    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr  # a re-deployment runs it again

    app = await asyncpg.connect(with_user(with_database(postgres, database), APP_ROLE))
    try:
        assert await migrate(app)  # `bus provision` as the app itself
        assert await schema_version(app) >= 1
        assert await migrate(app) == []
        await app.execute(
            f"INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, properties, "
            "version) VALUES ('billing', 'p', 'state', '{}', nextval('bus.row_version'))"
        )
        # The app's own tables land in its own schema, found first on the search path.
        await app.execute("CREATE TABLE charges (id text PRIMARY KEY)")
        where = await app.fetchval("SELECT schemaname FROM pg_tables WHERE tablename = 'charges'")
        assert where == APP_ROLE

        rights = await app.fetchrow(
            "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = $1",
            APP_ROLE,
        )
        assert rights is not None
        assert tuple(rights) == (False, False, False)
        for forbidden in (
            "CREATE SCHEMA elsewhere",
            "CREATE TABLE public.anything (id int)",
            f'CREATE ROLE "{APP_ROLE}-2"',
            "CREATE DATABASE another",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await app.execute(forbidden)
    finally:
        await app.close()


def test_the_sql_quotes_every_use_of_the_role_name() -> None:
    # psql's :"name" quotes an identifier and :'name' a literal; a bare :name would let a
    # role name with SQL in it run as the administrator.
    text = Path(ROLE_SQL).read_text(encoding="utf-8")
    for variable in ("app_role", "app_object_id", "database"):
        bare = text.count(f":{variable}")
        assert bare == 0, f"unquoted :{variable}"
