"""Reading a function app's bindings, serving its HTTP routes with keys, and timers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import RawTestServer, TestClient
from multidict import CIMultiDict

from lab.host.functions import LoadedApp, load_functions, resolve_setting_references
from lab.host.http import HttpFrontEnd, Keys, joined_headers
from lab.host.timers import run_timer
from lab.local.azurite import REPO_ROOT
from shared.errors import ConfigurationError

APPS = Path(__file__).parent / "apps"
SETTINGS = {"TEST_QUEUE": "work-items", "TEST_SCHEDULE": "*/1 * * * * *"}
KEYS = Keys(function="fn-key", master="master-key")


def load(settings: dict[str, str] = SETTINGS) -> tuple[LoadedApp, Any]:
    loaded = load_functions(APPS / "triggers_app.py", settings)
    import triggers_app  # type: ignore[import-not-found]  # put on sys.path by the loader

    triggers_app.seen.clear()
    return loaded, triggers_app


def test_each_trigger_kind_is_read_with_setting_references_resolved() -> None:
    loaded, _ = load()
    [queue] = loaded.queues
    assert (queue.name, queue.queue_name, queue.connection) == (
        "on_queue",
        "work-items",
        "AzureWebJobsStorage",
    )
    [timer] = loaded.timers
    assert timer.schedule.expression == "*/1 * * * * *"
    assert timer.run_on_startup is True
    routes = {h.name: (h.route, sorted(h.methods), h.auth_level) for h in loaded.http}
    assert routes == {
        "echo": ("echo/{name}", ["GET"], "anonymous"),
        "items": ("items/{id?}", ["POST", "PUT"], "function"),
        "reset": ("admin/reset", ["POST"], "admin"),
        "broken": (
            "broken",
            ["DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"],
            "function",
        ),
    }


def test_loading_twice_works_although_get_functions_may_run_once_per_app() -> None:
    assert load()[0].names == load()[0].names


def test_a_missing_app_setting_names_the_function_and_the_setting() -> None:
    with pytest.raises(
        ConfigurationError, match=r"function on_queue refers to app setting %TEST_QUEUE%"
    ):
        load({"TEST_SCHEDULE": "* * * * * *"})
    assert resolve_setting_references("%A%-%B%", {"A": "x", "B": "y"}, "here") == "x-y"


def test_only_the_named_functions_run_and_unknown_names_are_refused() -> None:
    loaded = load_functions(APPS / "triggers_app.py", SETTINGS, only={"echo"})
    assert loaded.names == ["echo"]
    with pytest.raises(ConfigurationError, match="no functions named"):
        load_functions(APPS / "triggers_app.py", SETTINGS, only={"nope"})


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    loaded, _ = load()
    front = HttpFrontEnd(loaded.http, KEYS, function_timeout=5)
    c: TestClient[Any, Any]
    async with TestClient(RawTestServer(front.dispatch)) as c:
        yield c


async def test_routes_match_templates_and_pass_route_and_query_parameters(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get("/api/echo/ada?q=1")
    assert response.status == 200
    assert await response.json() == {"name": "ada", "q": "1"}
    response = await client.post("/api/items/7", data=b"x", headers={"x-functions-key": "fn-key"})
    assert (response.status, await response.text()) == (201, "POST 7 x")
    response = await client.put("/api/items", data=b"y", headers={"x-functions-key": "fn-key"})
    assert (response.status, await response.text()) == (201, "PUT none y")
    assert (await client.get("/api/nothing-here")).status == 404
    assert (await client.get("/elsewhere")).status == 404


async def test_a_wrong_method_gets_405_with_the_allowed_ones(client: TestClient[Any, Any]) -> None:
    response = await client.delete("/api/echo/ada")
    assert response.status == 405
    assert response.headers["Allow"] == "GET"


async def test_function_level_routes_need_the_function_or_master_key(
    client: TestClient[Any, Any],
) -> None:
    assert (await client.post("/api/items/1")).status == 401
    assert (await client.post("/api/items/1", headers={"x-functions-key": "wrong"})).status == 401
    assert (await client.post("/api/items/1?code=fn-key")).status == 201
    assert (
        await client.post("/api/items/1", headers={"x-functions-key": "master-key"})
    ).status == 201


async def test_admin_routes_need_the_master_key(client: TestClient[Any, Any]) -> None:
    assert (await client.post("/api/admin/reset?code=fn-key")).status == 401
    assert (await client.post("/api/admin/reset?code=master-key")).status == 204


async def test_a_failing_function_answers_500_and_the_server_keeps_serving(
    client: TestClient[Any, Any],
) -> None:
    assert (await client.get("/api/broken?code=fn-key")).status == 500
    assert (await client.get("/api/echo/still-up")).status == 200


async def test_a_timer_runs_on_startup_and_then_on_its_schedule() -> None:
    loaded, module = load()
    [timer] = loaded.timers
    stopping = asyncio.Event()
    running = asyncio.create_task(run_timer(timer, stopping, function_timeout=5))
    await asyncio.sleep(2.2)
    stopping.set()
    runs = await asyncio.wait_for(running, 5)
    assert 2 <= runs <= 4  # on start-up, then once a second (2-3 seconds begin in 2.2 s)
    assert [kind for kind, _ in module.seen] == ["timer"] * runs
    assert module.seen[0] == ("timer", False)


def test_the_host_command_exits_3_with_the_reason_when_a_setting_is_missing(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEST_")}
    command = [sys.executable, "-m", "lab.host", "--app", str(APPS / "triggers_app.py")]
    command += ["--host-json", str(REPO_ROOT / "host.json")]
    result = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**env, "TEST_SCHEDULE": "* * * * * *"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    assert "refers to app setting %TEST_QUEUE% which is not set" in result.stderr


def test_repeated_headers_reach_a_function_joined_as_on_azure() -> None:
    headers = CIMultiDict([("Idempotency-Key", "a"), ("Accept", "x"), ("idempotency-key", "b")])
    assert joined_headers(headers) == {"Idempotency-Key": "a, b", "Accept": "x"}
