"""``bus console --system FILE``: one console over every app of a system, each app's views
and actions on its own names and accounts. Run as the operator runs it, a real process over
two emulators: the messaging account, and the orders app's state account (the shipping app
keeps its rows in the messaging account, as a single app does)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.cli.opened import opened_worker
from shared.provisioning import provision
from shared.resources import RESOURCES_FILE
from shared.system import load_system
from tests.cli.test_cli_account import run
from tests.cli.test_cli_system_status import EXIT_CONFIGURATION, EXIT_USAGE, system_file
from tests.conftest import SAMPLE_APP, sample_provider_settings, started_azurite
from tests.console.parking import clear, park, parked_content
from tests.console.running import RunningConsole, console_environ, running_console

pytestmark = pytest.mark.azurite

APPS = {"orders": {"orders", "loyalty", "storefront"}, "shipping": {"shipping"}}


@pytest.fixture(scope="module")
def messaging() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture(scope="module")
def orders_state() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory,
    messaging: AzuriteEndpoints,
    orders_state: AzuriteEndpoints,
) -> Iterator[RunningConsole]:
    """``bus console --system`` over the two apps, each provisioned in its accounts by
    ``bus provision`` run on the system's settings."""
    folder = tmp_path_factory.mktemp("system")
    path = system_file(folder, messaging.connection_string, orders_state.connection_string)
    off_the_loop(provision_each, path)
    environ = console_environ(messaging.connection_string)
    with running_console(folder, environ, "--system", str(path), "--by", "ada") as running:
        yield running


def off_the_loop(work: Callable[..., None], *args: object) -> None:
    """``work(*args)`` on a thread of its own: it runs an event loop, which a thread that
    drives a browser (Playwright's) already has."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(work, *args).result()


def provision_each(path: Path) -> None:
    async def each() -> None:
        for app in load_system(path, environ={}).load():
            async with opened_worker(app.app, app.config, require_resources=False) as worker:
                await provision(worker.account(), worker.resources, state=worker.state_account())

    asyncio.run(each())


@pytest.fixture
def emptied(system: RunningConsole, messaging: AzuriteEndpoints) -> RunningConsole:
    off_the_loop(clear, messaging, "orders", "loyalty", "shipping")
    return system


def test_the_session_lists_the_apps_and_answers_for_the_one_named(
    system: RunningConsole,
) -> None:
    first = system.session()
    assert first["system"] == {"app": "orders", "apps": ["orders", "shipping"]}
    assert first["app"] == "shared.sample.system:orders"
    named = system.get("/api/session?app=shipping").json()
    assert named["system"] == {"app": "shipping", "apps": ["orders", "shipping"]}
    assert named["app"] == "shared.sample.system:shipping"
    assert named["csrf"] == first["csrf"]  # one operator, one CSRF value for every app


def test_each_apps_overview_shows_its_own_endpoints(system: RunningConsole) -> None:
    for app, endpoints in APPS.items():
        answer = system.get(f"/api/overview?app={app}")
        assert answer.status == 200, answer.body
        assert {e["name"] for e in answer.json()["endpoints"]} == endpoints


def test_each_apps_poison_listing_is_its_own(
    emptied: RunningConsole, messaging: AzuriteEndpoints
) -> None:
    park(messaging, [parked_content(i, "shipping") for i in range(3)], endpoint="shipping")
    park(messaging, [parked_content(9, "orders")], endpoint="orders")
    shipping = emptied.get("/api/failed?app=shipping").json()
    orders = emptied.get("/api/failed?app=orders").json()
    assert (shipping["total"], orders["total"]) == (3, 1)
    assert {m["endpoint"] for m in shipping["messages"]} == {"shipping"}
    assert orders["messages"][0]["message_id"] == "m-9"
    # An endpoint of another app is not this app's, whichever way it is named.
    assert emptied.get("/api/failed?app=orders&endpoint=shipping").status == 404
    one = shipping["messages"][0]
    assert emptied.get(f"/api/failed/shipping/{one['id']}?app=orders").status == 404
    assert emptied.get(f"/api/failed/shipping/{one['id']}?app=shipping").status == 200


def test_a_replay_through_one_apps_view_is_journaled_in_that_apps_journal(
    emptied: RunningConsole, messaging: AzuriteEndpoints
) -> None:
    before = {app: journal_size(emptied, app) for app in APPS}
    park(messaging, [parked_content(1, "shipping")], endpoint="shipping")
    listed = emptied.get("/api/failed?app=shipping").json()["messages"]
    refused = emptied.post(
        "/api/replay?app=orders", {"endpoint": "shipping", "ids": [listed[0]["id"]]}
    )
    assert refused.status == 404  # not an endpoint of orders: nothing replayed
    replayed = emptied.post(
        "/api/replay?app=shipping", {"endpoint": "shipping", "ids": [listed[0]["id"]]}
    )
    assert replayed.status == 200, replayed.body
    assert replayed.json()["replayed"] == 1
    assert journal_size(emptied, "shipping") == before["shipping"] + 1
    assert journal_size(emptied, "orders") == before["orders"]
    newest = emptied.get("/api/actions?app=shipping&size=1").json()["actions"][0]
    assert (newest["id"], newest["who"]) == (replayed.json()["action"], "ada")


def journal_size(console: RunningConsole, app: str) -> int:
    answer = console.get(f"/api/actions?app={app}")
    assert answer.status == 200, answer.body
    total: int = answer.json()["total"]
    return total


def test_an_app_the_system_does_not_list_is_refused(system: RunningConsole) -> None:
    for path in ("/api/overview?app=nosuch", "/api/session?app=nosuch", "/api/failed?app="):
        answer = system.get(path)
        assert answer.status == 404, path
        assert json.loads(answer.body) == {"error": "no such app in this system"}
    action = system.post("/api/replay?app=nosuch", {"endpoint": "orders", "ids": []})
    assert action.status == 404
    # Every request but the session's names its app; none is answered for a default one.
    unnamed = system.get("/api/overview")
    assert unnamed.status == 400
    assert "name the app" in unnamed.json()["error"]


def test_a_stranger_learns_no_app_name(system: RunningConsole) -> None:
    for app in ("orders", "nosuch"):
        answer = system.get(f"/api/overview?app={app}", token="wrong")
        assert answer.status == 401
    assert system.get("/api/session", token=None).status == 401


@pytest.fixture(scope="module")
def shop(
    tmp_path_factory: pytest.TempPathFactory, messaging: AzuriteEndpoints
) -> Iterator[RunningConsole]:
    """``bus console --system`` over one app that declares services (the sample's), named
    ``shop`` by the system file: its performer runs as ``shopeffects``."""
    folder = tmp_path_factory.mktemp("shop")
    path = folder / "system.json"
    settings = {"AzureWebJobsStorage": messaging.connection_string, **sample_provider_settings()}
    app = {"name": "shop", "busApp": SAMPLE_APP, "store": "table", "settings": settings}
    path.write_text(json.dumps({"apps": [app]}))
    environ = console_environ(messaging.connection_string)
    # In processes of their own: this one may have run the sample's app object under no name.
    resources = bus(folder, {**environ, "BUS_APP_NAME": "shop"}, "resources")
    (folder / RESOURCES_FILE).parent.mkdir(parents=True)
    (folder / RESOURCES_FILE).write_text(resources)
    bus(folder, {**environ, "BUS_APP_NAME": "shop"}, "provision")
    with running_console(folder, environ, "--system", str(path)) as running:
        yield running


def bus(folder: Path, environ: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "shared.cli", *args],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_apps_performer_is_the_one_named_after_the_app(shop: RunningConsole) -> None:
    answer = shop.get("/api/overview?app=shop")
    assert answer.status == 200, answer.body
    names = {e["name"] for e in answer.json()["endpoints"]}
    assert "shopeffects" in names, names
    assert "effects" not in names  # no queue of that name was provisioned, nor should be
    assert shop.get("/api/failed?app=shop&endpoint=effects").status == 404


def test_options_naming_one_app_are_refused_with_a_system(tmp_path: Path) -> None:
    path = system_file(tmp_path, "UseDevelopmentStorage=true", "UseDevelopmentStorage=true")
    result = run(tmp_path, "--app", SAMPLE_APP, "console", "--system", str(path))
    assert result.returncode == EXIT_USAGE
    assert "console --system takes each app's settings from the system file, not --app" in (
        result.stderr
    )


def test_a_faulty_system_file_stops_the_console_before_it_listens(tmp_path: Path) -> None:
    path = tmp_path / "system.json"
    path.write_text(json.dumps({"apps": [{"name": "orders", "busApp": "no.such:app"}]}))
    result = run(tmp_path, "console", "--port", "0", "--system", str(path))
    assert result.returncode == EXIT_CONFIGURATION
    assert "console:" not in result.stdout
    assert f"system file {path}, app orders: store must be a non-empty string" in result.stderr
