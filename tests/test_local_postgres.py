"""The private PostgreSQL server of tests, the demo and the bench: started as an unprivileged
user on a free port, stopped by its PID, leaving nothing behind."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import asyncpg
import pytest

from lab.local.postgres import PostgresServer, find_binaries
from shared.errors import ConfigurationError

pytestmark = pytest.mark.postgres


async def test_a_server_starts_serves_and_stops_by_its_pid() -> None:
    server = PostgresServer()
    try:
        url = server.start()
    except ConfigurationError as e:
        pytest.skip(f"PostgreSQL unavailable (run `make deps`): {e}")
    pid = server.postmaster_pid()
    try:
        assert pid is not None
        runs_as = os.stat(f"/proc/{pid}").st_uid
        connection = await asyncpg.connect(url)
        try:
            user = await connection.fetchval("SELECT current_user")
        finally:
            await connection.close()
    finally:
        server.stop()

    assert user == "bus"
    # initdb and postgres refuse root: started by root, the server runs as postgres.
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert runs_as == expected != 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not server.location.exists()


def test_a_binaries_folder_that_holds_no_server_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTGRES_BIN", str(tmp_path))
    with pytest.raises(ConfigurationError, match="holds no initdb and postgres"):
        find_binaries()
