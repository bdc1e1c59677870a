"""The console's sagas: the overview counts each saga's instances live and completed, the
timeouts they wait for with the earliest due, its ``saga_not_found`` messages and rows no
saga wrote (the endpoints that are no saga have none); ``GET /api/saga`` looks one instance
up by its correlation value, a hostile value refused with a 400 that does not repeat it,
markup answered escaped. On memory, the overview as the API builds it; on Azurite, ``bus
console``'s answers over real HTTP, with its guard."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.console.overview import overview
from shared.runtime import Worker
from shared.settings import Settings, StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.console.running import RunningConsole, console_environ, running_console
from tests.console.saga_app import APP, CHECKOUT, LEDGER, app
from tests.console.sagas import MARKUP, OVERDUE_BY, WAITING, leave_instances

LEFT = {
    "live": 3,  # live-1, waiting-1 and the one named by markup
    "completed": 1,
    "unreadable": 1,
    "timeouts_pending": 4,
    "not_found": 2,
}


def saga_of(seen: dict[str, Any], name: str) -> Any:
    [endpoint] = [e for e in seen["endpoints"] if e["name"] == name]
    return endpoint["saga"]


def counts(saga: dict[str, Any]) -> dict[str, int]:
    return {figure: saga[figure] for figure in LEFT}


async def left_in_memory() -> Worker:
    memory = MemoryStorageAccount()
    await leave_instances(memory)
    return Worker(app, Settings({}, {}), memory)


async def test_the_overview_counts_each_sagas_instances() -> None:
    worker = await left_in_memory()

    seen = await overview(worker, datetime.now(UTC), scan_limit=1000)

    saga = saga_of(seen, CHECKOUT)
    assert counts(saga) == LEFT
    assert saga["next_timeout_overdue_seconds"] >= OVERDUE_BY.total_seconds()
    assert datetime.fromisoformat(saga["next_timeout_due"]) < datetime.now(UTC)
    assert (saga["instances_scanned"], saga["complete"]) == (5, True)
    assert saga["retention_seconds"] == worker.config.saga_retention_seconds
    assert saga_of(seen, LEDGER) is None


async def test_a_look_stopped_at_its_scan_limit_says_so() -> None:
    worker = await left_in_memory()

    seen = await overview(worker, datetime.now(UTC), scan_limit=2)

    saga = saga_of(seen, CHECKOUT)
    assert (saga["instances_scanned"], saga["audit_rows_scanned"]) == (2, 2)
    assert saga["complete"] is False


@pytest.fixture(scope="module")
def console(
    emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    async def leave() -> None:
        async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
            await leave_instances(account)

    asyncio.run(leave())
    environ = console_environ(emulator.connection_string, **{APP_SETTING: APP})
    folder: Path = tmp_path_factory.mktemp("sagas")
    with running_console(folder, environ, "--by", "ada") as running:
        yield running


def look_up(console: RunningConsole, **query: str) -> tuple[int, Any]:
    answer = console.get("/api/saga?" + urlencode(query))
    return answer.status, answer.json()


@pytest.mark.azurite
def test_bus_console_answers_the_sagas_counts_on_azurite(console: RunningConsole) -> None:
    answer = console.get("/api/overview")

    assert answer.status == 200, answer.body
    saga = saga_of(answer.json(), CHECKOUT)
    assert counts(saga) == LEFT
    assert saga["complete"] is True
    assert saga_of(answer.json(), LEDGER) is None


@pytest.mark.azurite
def test_an_instance_is_looked_up_by_its_correlation_value(console: RunningConsole) -> None:
    status, live = look_up(console, endpoint=CHECKOUT, instance="live-1")
    assert status == 200, live
    assert live["instance"]["status"] == "live"
    assert live["instance"]["started_by"]
    assert live["instance"]["pending_timeouts"] == []
    assert live["sagas"] == [CHECKOUT]

    status, done = look_up(console, endpoint=CHECKOUT, instance="done-1")
    assert (status, done["instance"]["status"]) == (200, "completed")
    assert done["instance"]["completed_at"]

    status, waiting = look_up(console, endpoint=CHECKOUT, instance=WAITING)
    assert status == 200
    timeouts = waiting["instance"]["pending_timeouts"]
    assert [t["message_id"] for t in timeouts] == ["t-overdue", MARKUP]

    status, none = look_up(console, endpoint=CHECKOUT, instance="never-1")
    assert (status, none["instance"]) == (200, None)  # saga_not_found started nothing

    status, damaged = look_up(console, endpoint=CHECKOUT, instance="damaged-1")
    assert status == 200
    assert "not a saga instance" in damaged["instance"]["unreadable"]


@pytest.mark.azurite
def test_markup_in_a_correlation_value_is_answered_escaped(console: RunningConsole) -> None:
    answer = console.get("/api/saga?" + urlencode({"endpoint": CHECKOUT, "instance": MARKUP}))

    assert answer.status == 200
    assert b"<" not in answer.body
    assert b">" not in answer.body
    found = answer.json()
    assert found["correlation"] == MARKUP
    assert found["instance"]["started_by"] == MARKUP


HOSTILE = [
    "a/b",
    "a\\b",
    "a#b",
    "a?b",
    "a\x00b",
    "line\nbreak",
    "x" * 1025,
    "\u202e\x1b[31m",
]


@pytest.mark.azurite
@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_value_that_is_no_partition_key_is_refused_unrepeated(
    console: RunningConsole, value: str
) -> None:
    status, refused = look_up(console, endpoint=CHECKOUT, instance=value)

    assert status == 400
    assert "a correlation value is a partition key" in refused["error"]
    assert value not in refused["error"]


@pytest.mark.azurite
def test_the_look_up_is_guarded_and_names_a_saga(console: RunningConsole) -> None:
    status, missing = look_up(console, endpoint=CHECKOUT)
    assert status == 400
    assert missing["error"] == "name the instance: its correlation value (?instance=)"
    for endpoint in (LEDGER, "nosuch", MARKUP):
        status, refused = look_up(console, endpoint=endpoint, instance="live-1")
        assert (status, refused["error"]) == (404, "no such saga in this app")
    assert console.get("/api/saga?" + urlencode({"instance": "live-1"})).status == 404
    path = "/api/saga?" + urlencode({"endpoint": CHECKOUT, "instance": "live-1"})
    assert console.get(path, token=None).status == 401
    assert console.get(path, token="wrong").status == 401
    assert console.post(path, {}).status == 405
