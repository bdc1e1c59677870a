"""``bus status --system FILE``: every app of a system reported, each against its own state
account and the shared messaging account; the exit code the worst app's; an app whose state
account does not answer reported as such without hiding the others. Run as real processes
against two emulators of this module's: the messaging account, and the orders app's state
account (the shipping app keeps its rows in the messaging account, as a single app does)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.cli.opened import opened_worker
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.settings import DEV_ACCOUNT
from shared.system import load_system
from tests.cli.test_cli_account import assert_no_secret, emulator_endpoint, run
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIGURATION = 3
EXIT_UNHEALTHY = 4

NOWHERE = (
    "DefaultEndpointsProtocol=http;AccountName=nowhere;AccountKey=bm93aGVyZQ==;"
    "BlobEndpoint=http://127.0.0.1:9/nowhere;QueueEndpoint=http://127.0.0.1:9/nowhere;"
    "TableEndpoint=http://127.0.0.1:9/nowhere;"
)
QUICK = {
    "BUS_STORAGE_CONNECT_TIMEOUT": "1",
    "BUS_STORAGE_READ_TIMEOUT": "1",
    "BUS_STORAGE_CALL_TIMEOUT": "2",
    "BUS_INGRESS_TIMEOUT": "4",
}


@pytest.fixture(scope="module")
def messaging() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture(scope="module")
def orders_state() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


def system_file(folder: Path, messaging: str, orders_state: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "system.json"
    apps = [
        {
            "name": "orders",
            "busApp": "shared.sample.system:orders",
            "store": "table",
            "settings": {
                "AzureWebJobsStorage": messaging,
                "BUS_STATE_STORAGE_SETTING": "OrdersState",
                "OrdersState": orders_state,
                **QUICK,
            },
        },
        {
            "name": "shipping",
            "busApp": "shared.sample.system:shipping",
            "store": "table",
            "settings": {"AzureWebJobsStorage": messaging},
        },
    ]
    path.write_text(json.dumps({"apps": apps}))
    return path


@pytest.fixture
async def system(
    tmp_path: Path, messaging: AzuriteEndpoints, orders_state: AzuriteEndpoints
) -> Path:
    """The system file, every app provisioned in its accounts (idempotent)."""
    path = system_file(tmp_path, messaging.connection_string, orders_state.connection_string)
    for app in load_system(path, environ={}).load():
        async with opened_worker(app.app, app.config, require_resources=False) as worker:
            await provision(worker.account(), worker.resources, state=worker.state_account())
    return path


def status(folder: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = run(folder, "status", "--json", *args)
    assert_no_secret(result)
    return result.returncode, json.loads(result.stdout or "{}"), result.stderr


async def test_every_app_is_reported_against_its_own_state_account(
    system: Path, messaging: AzuriteEndpoints, orders_state: AzuriteEndpoints
) -> None:
    code, report, stderr = status(system.parent, "--system", str(system))
    assert code == 0, stderr
    orders, shipping = report["apps"]["orders"], report["apps"]["shipping"]
    assert set(orders["endpoints"]) == {"orders", "loyalty", "storefront"}
    assert set(shipping["endpoints"]) == {"shipping"}
    assert orders["state_account"]["endpoint"] == emulator_endpoint(orders_state)
    assert "state_account" not in shipping  # its rows are in the messaging account
    for app in (orders, shipping):
        assert app["account"]["name"] == DEV_ACCOUNT
        assert app["account"]["endpoint"] == emulator_endpoint(messaging)
        assert app["missing"] == []
    # Each endpoint's table was read where it is: a table missing would be reported.
    assert orders["endpoints"]["orders"]["queue"] == 0
    assert f"bus (app orders) (state): account {DEV_ACCOUNT}" in stderr

    text = run(system.parent, "status", "--system", str(system))
    assert text.returncode == 0, text.stderr
    assert "app orders (shared.sample.system:orders):" in text.stdout.splitlines()
    assert "app shipping (shared.sample.system:shipping):" in text.stdout.splitlines()


async def test_the_exit_code_is_the_worst_apps(system: Path) -> None:
    for app in load_system(system, environ={}).load():
        if app.name == "shipping":
            async with opened_worker(app.app, app.config, require_resources=True) as worker:
                await worker.account().queue(poison_queue("shipping")).send("{}")
    try:
        code, report, _ = status(system.parent, "--system", str(system), "--check")
        assert code == EXIT_UNHEALTHY
        assert report["apps"]["shipping"]["endpoints"]["shipping"]["poison"] == 1
        assert report["apps"]["orders"]["endpoints"]["orders"]["poison"] == 0
        code, _, _ = status(system.parent, "--system", str(system))
        assert code == 0  # without --check, poison waiting is reported, not failed
    finally:
        for app in load_system(system, environ={}).load():
            if app.name == "shipping":
                async with opened_worker(app.app, app.config, require_resources=True) as w:
                    queue = w.account().queue(poison_queue("shipping"))
                    for message in await queue.receive(32):
                        await queue.delete(message.id, message.pop_receipt)


async def test_an_app_whose_state_account_does_not_answer_hides_no_other_app(
    system: Path, messaging: AzuriteEndpoints
) -> None:
    broken = system_file(system.parent / "broken", messaging.connection_string, NOWHERE)
    code, report, stderr = status(system.parent, "--system", str(broken))
    assert code == EXIT_FAILED  # as bus status of the orders app alone fails
    unread = report["apps"]["orders"]["error"]
    assert "the state account (connection string for account nowhere)" in unread
    assert "bus: app orders: " in stderr
    assert report["apps"]["shipping"]["missing"] == []
    assert set(report["apps"]["shipping"]["endpoints"]) == {"shipping"}


def test_options_naming_one_app_are_refused_with_a_system(tmp_path: Path) -> None:
    path = system_file(tmp_path, "UseDevelopmentStorage=true", "UseDevelopmentStorage=true")
    result = run(tmp_path, "--app", "shared.sample.system:orders", "status", "--system", str(path))
    assert result.returncode == EXIT_USAGE
    assert "not --app" in result.stderr


def test_a_faulty_system_file_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "system.json"
    path.write_text(json.dumps({"apps": [{"name": "orders"}]}))
    result = run(tmp_path, "status", "--system", str(path))
    assert result.returncode == EXIT_CONFIGURATION
    assert f"system file {path}, app orders: busApp must be a non-empty string" in result.stderr
