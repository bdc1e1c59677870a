"""The overview shows, for each endpoint that takes transactional sessions, its sessions
waiting to be signalled (a request that committed and stopped before its signals), open and
finished ones; a session row damaged by hand is counted as unreadable and breaks nothing; a
look reads at most its scan limit of records and says when it stopped. On memory, the overview
as the API builds it; on Azurite, ``bus console``'s answer over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.bus.formats import NEWEST, PROPERTY
from shared.bus.session_records import SESSION_PREFIX
from shared.cli.records import count_records, describe
from shared.console.overview import overview
from shared.runtime import Worker
from shared.settings import Settings, StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity
from tests.console.running import RunningConsole, console_environ, running_console
from tests.console.session_app import APP, KIOSK, ORDERS, STOREFRONT, app
from tests.console.sessions import leave_sessions, provisioned

LEFT = {"waiting": 1, "open": 1, "finished": 1, "unreadable": 1}
"""What ``leave_sessions`` leaves on an endpoint."""
NONE = {"waiting": 0, "open": 0, "finished": 0, "unreadable": 0}


def endpoint(seen: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in seen["endpoints"] if e["name"] == name)
    return found


def counts(sessions: dict[str, Any]) -> dict[str, int]:
    return {state: sessions[state] for state in LEFT}


async def left_in_memory() -> Worker:
    memory = MemoryStorageAccount()
    await provisioned(memory)
    await leave_sessions(memory, STOREFRONT)
    return Worker(app, Settings({}, {}), memory)


async def test_the_overview_counts_each_session_endpoints_sessions_by_state() -> None:
    worker = await left_in_memory()

    seen = await overview(worker, datetime.now(UTC), scan_limit=1000)

    sessions = endpoint(seen, STOREFRONT)["sessions"]
    assert counts(sessions) == LEFT
    assert (sessions["records_scanned"], sessions["complete"]) == (4, True)
    assert 0 <= sessions["oldest_waiting_seconds"] < 600
    assert sessions["resend_after_seconds"] == worker.config.session_resend_seconds
    kiosk = endpoint(seen, KIOSK)["sessions"]
    assert counts(kiosk) == NONE
    assert kiosk["oldest_waiting_seconds"] is None
    assert endpoint(seen, ORDERS)["sessions"] is None  # takes no sessions
    # A session's audit row is no processed message (the audit counts none either).
    storefront = endpoint(seen, STOREFRONT)
    assert sum(m["count"] for m in storefront["processed_last_minutes"]) == 0
    assert storefront["latency_ms"] == {"p50": None, "p95": None}


async def test_a_look_stopped_at_its_scan_limit_says_so() -> None:
    worker = await left_in_memory()

    seen = await overview(worker, datetime.now(UTC), scan_limit=3)

    # Records are read in key order: the damaged row's partition, then finished and open;
    # the waiting one is beyond the limit, so none is counted as waiting, and that is a
    # lower bound.
    sessions = endpoint(seen, STOREFRONT)["sessions"]
    assert counts(sessions) == {"waiting": 0, "open": 1, "finished": 1, "unreadable": 1}
    assert (sessions["records_scanned"], sessions["complete"]) == (3, False)


async def test_bus_status_counts_a_damaged_session_row_as_unreadable() -> None:
    worker = await left_in_memory()

    found = await count_records(app.get(STOREFRONT), worker.bus().endpoint_state(STOREFRONT))

    assert found["sessions_unreadable"] == 1
    assert found["sessions_waiting"] == 1
    assert describe(found).endswith(
        "sessions: 1 waiting to be signalled, 1 open, 1 finished, 1 unreadable"
    )


async def test_a_record_of_a_newer_version_is_counted_as_unreadable() -> None:
    worker = await left_in_memory()
    rows = worker.endpoint_rows()[STOREFRONT]
    records = [e async for e in rows.every(row_key_prefix=SESSION_PREFIX)]
    [finished] = [e for e in records if e.partition_key == "finished"]
    newer = Entity("newer", finished.row_key, {**finished.properties, PROPERTY: NEWEST + 1})
    await rows.insert(newer)

    seen = await overview(worker, datetime.now(UTC), scan_limit=1000)

    assert counts(endpoint(seen, STOREFRONT)["sessions"]) == {**LEFT, "unreadable": 2}


@pytest.fixture(scope="module")
def console(
    emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    async def leave() -> None:
        async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
            await provisioned(account)
            await leave_sessions(account, STOREFRONT)

    asyncio.run(leave())
    environ = console_environ(emulator.connection_string, **{APP_SETTING: APP})
    folder: Path = tmp_path_factory.mktemp("sessions")
    with running_console(folder, environ, "--by", "ada") as running:
        yield running


@pytest.mark.azurite
def test_bus_console_answers_the_sessions_waiting_on_azurite(console: RunningConsole) -> None:
    answer = console.get("/api/overview")

    assert answer.status == 200, answer.body
    seen = answer.json()
    sessions = endpoint(seen, STOREFRONT)["sessions"]
    assert counts(sessions) == LEFT
    assert (sessions["records_scanned"], sessions["complete"]) == (4, True)
    assert sessions["oldest_waiting_seconds"] >= 0
    assert counts(endpoint(seen, KIOSK)["sessions"]) == NONE
    assert endpoint(seen, ORDERS)["sessions"] is None
