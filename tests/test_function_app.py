"""The function app's bindings, generated from the app, exercised without the Functions host.

In this process they are the sample app's, on settings the tests give (``sample_settings``),
whatever app the checkout runs; ``function_app.py`` itself is imported in fresh interpreters
with the settings each test names."""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
import subprocess
import textwrap
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import azure.functions as func
import pytest
from azure.functions.queue import QueueMessage
from azure.functions.timer import TimerRequest

from lab.host.ncrontab import Schedule
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from lab.local.payments import Provider
from shared import runtime
from shared.bindings import FIXED_FUNCTIONS, blueprint
from shared.bus import BusApp
from shared.bus.poison import unwrap
from shared.config import build_config
from shared.errors import ConfigurationError
from shared.provisioning import provision
from shared.resources import RESOURCES_FILE, poison_queue, resources_json
from shared.sample.app import PlaceOrder
from shared.sample.app import app as sample_app
from shared.settings import resolve_settings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import sample_provider_settings, sample_settings
from tests.fresh import run_fresh
from tests.infra.provisioned import INFRA_DIR, provisioned_resources

SAMPLE = runtime.Worker(sample_app, sample_settings())
"""The worker of the sample app whose functions these tests call."""


def declared_functions(worker: runtime.Worker = SAMPLE) -> dict[str, Any]:
    """The functions ``function_app.py`` declares for ``worker`` (the sample app's)."""
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_functions(blueprint(worker))
    return {str(f.get_function_name()): f for f in app.get_functions()}


def user_function(name: str) -> Callable[..., Any]:
    """The generated function the host would call for ``name``."""
    return declared_functions()[name].get_user_function()  # type: ignore[no-any-return]


def queue_triggers() -> dict[str, str]:
    """function name -> queue name, for every queue-triggered function."""
    found = {}
    for name, function in declared_functions().items():
        trigger = function.get_trigger()
        if trigger.get_binding_name() == "queueTrigger":
            found[name] = trigger.queue_name
    return found


def test_every_sample_endpoint_has_one_queue_trigger_on_its_own_queue() -> None:
    triggers = queue_triggers()
    assert sorted(triggers.values()) == sorted(sample_app.endpoints)
    assert all(name == queue for name, queue in triggers.items())


USER_APP = textwrap.dedent(
    """
    from shared.bus import BusApp, Command

    app = BusApp()
    not_an_app = 42


    class ReserveStock(Command):
        partition_by = "sku"
        sku: str


    inventory = app.endpoint("inventory")
    billing = app.endpoint("billing", mode="processed_messages")


    @inventory.handles(ReserveStock)
    def reserve(ctx, cmd):
        pass
    """
)


def write_user_app(folder: Path) -> None:
    """A package of the user's, outside ``shared/``, with its own endpoints."""
    (folder / "myshop").mkdir()
    (folder / "myshop" / "__init__.py").write_text("")
    (folder / "myshop" / "app.py").write_text(USER_APP)


INDEX = """
import json
import function_app
print(json.dumps({
    f.get_function_name(): [f.get_trigger().get_binding_name(),
                            getattr(f.get_trigger(), "queue_name", None),
                            getattr(f.get_trigger(), "connection", None)]
    for f in function_app.app.get_functions()
}))
"""


def index_function_app(folder: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """Import function_app.py in a fresh interpreter, as the Functions host does, and list
    what ``app.get_functions()`` indexes."""
    return run_fresh(INDEX, settings, cwd=folder, path=[folder])


def test_function_app_indexes_exactly_the_functions_of_the_app_named_by_bus_app(
    tmp_path: Path,
) -> None:
    write_user_app(tmp_path)
    result = index_function_app(
        tmp_path, BUS_APP="myshop.app:app", BUS_STORAGE_SETTING="ShopStorage"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "inventory": ["queueTrigger", "inventory", "ShopStorage"],
        "billing": ["queueTrigger", "billing", "ShopStorage"],
        "health": ["httpTrigger", None, None],
        "ingress": ["httpTrigger", None, None],
        "cancel": ["httpTrigger", None, None],
        "cleanup": ["timerTrigger", None, None],
    }


def test_with_bus_app_unset_function_app_indexes_the_sample_app(tmp_path: Path) -> None:
    result = index_function_app(tmp_path, **sample_provider_settings())
    assert result.returncode == 0, result.stderr
    functions = [*sample_app.endpoints, *FIXED_FUNCTIONS, *sample_app.http_routes]
    assert sorted(json.loads(result.stdout)) == sorted(functions)


def test_bus_app_is_read_from_local_settings_json_when_the_environment_has_none(
    tmp_path: Path,
) -> None:
    write_user_app(tmp_path)
    values = {"BUS_APP": "myshop.app:app", "CLEANUP_SCHEDULE": "0 */5 * * * *"}
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": values}))
    result = index_function_app(tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(json.loads(result.stdout)) == [
        "billing",
        "cancel",
        "cleanup",
        "health",
        "ingress",
        "inventory",
    ]


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("myshop.nothere:app", "no module named 'myshop.nothere'"),
        ("myshop.app:missing", "has no attribute 'missing'"),
        ("myshop.app:not_an_app", "is a int, not a BusApp"),
    ],
)
def test_function_app_refuses_to_load_when_bus_app_names_no_app(
    tmp_path: Path, reference: str, message: str
) -> None:
    write_user_app(tmp_path)
    result = index_function_app(tmp_path, BUS_APP=reference)
    assert result.returncode != 0
    assert "ConfigurationError" in result.stderr
    assert f"BUS_APP={reference} from the environment" in result.stderr
    assert message in result.stderr


def test_an_endpoint_named_like_a_bus_function_is_refused() -> None:
    app = BusApp()
    app.endpoint("health")
    worker = runtime.Worker(app, resolve_settings(environ={}, local_file=None))
    with pytest.raises(ConfigurationError, match="share a function name"):
        blueprint(worker)


def test_every_queue_table_and_container_the_app_uses_is_provisioned_by_the_templates(
    tmp_path: Path,
) -> None:
    """The templates provision what ``infra/resources.json`` lists; with the file generated
    for the sample app, they provision everything its functions use."""
    infra = tmp_path / "infra"
    shutil.copytree(INFRA_DIR, infra)
    (tmp_path / RESOURCES_FILE).write_text(resources_json(SAMPLE.resources))
    provisioned = provisioned_resources(infra)
    resources = SAMPLE.resources
    used = {("queue", q) for q in queue_triggers().values()}
    used |= {("queue", poison_queue(q)) for q in queue_triggers().values()}
    used |= {("table", e) for e in sample_app.endpoints}
    used |= {("table", resources.tables["ingress"])}
    used |= {
        ("container", resources.containers[c])
        for c in ("tokens", "topics", "parked", "payloads", "discarded", "audits")
    }
    assert used - provisioned == set()


def test_the_health_route_is_declared() -> None:
    trigger = declared_functions()["health"].get_trigger()
    assert trigger.get_binding_name() == "httpTrigger"
    assert trigger.name == "req"


async def test_health_reports_missing_resources_then_healthy_once_provisioned() -> None:
    account = MemoryStorageAccount()
    worker = runtime.Worker(sample_app, sample_settings(), account)
    status, body = await worker.health()
    assert status == 503
    assert "queue orders" in json.loads(body)["missing"]

    await provision(account, worker.resources)
    status, body = await worker.health()
    assert status == 503  # provisioned, but no endpoint is subscribed to what it handles yet
    assert json.loads(body)["missing"] == []
    await worker.serving()
    status, body = await worker.health()
    assert status == 200
    assert json.loads(body)["checked"] > 10


@pytest.fixture
async def deployed(
    azurite: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AzureStorageAccount]:
    """The function app's runtime pointed at a freshly provisioned Azurite.

    The sample app's names are fixed, so the emulator's queues are cleared first."""
    worker = SAMPLE
    # The worker the functions are bound to, pointed at this Azurite.
    monkeypatch.setattr(
        worker,
        "app_config",
        build_config(sample_settings(AzureWebJobsStorage=azurite.connection_string)),
    )
    await worker.close()
    account = worker.account()
    assert isinstance(account, AzureStorageAccount)
    await provision(account, worker.resources)
    for queue in worker.resources.queue_names:
        await account.queue(queue).clear()
    await worker.bus().subscribe_all()
    yield account
    await worker.close()


async def deliver_all(deployed: AzureStorageAccount) -> int:
    """Call the declared queue functions with every message until the queues are quiet, as
    the host would: base64-decoded body, dequeue count. Returns how many were delivered."""
    functions = {name: user_function(name) for name in queue_triggers()}
    delivered = 0
    for _ in range(10):
        busy = False
        for name, function in functions.items():
            queue = deployed.queue(name)
            for message in await queue.receive(32, visibility_timeout=30):
                busy = True
                await function(
                    QueueMessage(  # type: ignore[no-untyped-call]
                        id=message.id,
                        body=message.content.encode(),
                        dequeue_count=message.dequeue_count,
                    )
                )
                await queue.delete(message.id, message.pop_receipt)
                delivered += 1
        if not busy:
            break
    return delivered


@pytest.mark.azurite
async def test_the_queue_functions_run_the_sample_order_flow(
    deployed: AzureStorageAccount, sample_provider: Provider
) -> None:
    """Drive the declared functions as the host would: base64-decoded body, dequeue count;
    the charge goes to the session's payment provider."""
    await (
        SAMPLE.bus()
        .client("cli")
        .send(
            PlaceOrder(order_id="fa-1", customer="ada", amount_cents=1250),
            to="orders",
            idempotency_key="fa-1",
        )
    )

    # PlaceOrder, OrderPlaced x2, ChargePayment, its EffectRequest, ChargeAnswered, ShipOrder,
    # OrderShipped (which completes the order's checkout)
    assert await deliver_all(deployed) == 8
    payments = deployed.table("payments")
    [state] = (await payments.query(partition_key="fa-1", row_keys=["state"])).entities
    assert json.loads(str(state["data"]))["amount_cents"] == 1250
    loyalty = deployed.table("loyalty")
    [points] = (await loyalty.query(partition_key="ada", row_keys=["state"])).entities
    assert json.loads(str(points["data"])) == {"orders": 1, "points": 12}
    async with aiohttp.ClientSession() as session:
        ledger = await sample_provider.ledger(session)
    [charge] = [e for e in ledger.entries if e.order == "fa-1"]
    assert (charge.kind, charge.amount) == ("charge", 1250)
    paid = json.loads(str(state["data"]))
    assert (paid["status"], paid["charge_key"], paid["payment_id"]) == (
        "charged",
        charge.key,
        charge.id,
    )


@pytest.mark.azurite
async def test_a_body_that_is_not_utf8_is_parked_whole(deployed: AzureStorageAccount) -> None:
    """On Azure the host hands the function the decoded bytes; they may be anything."""
    body = b'\xff\xfe{"message_id": "\x80"}'

    message = QueueMessage(id="m", body=body, dequeue_count=1)  # type: ignore[no-untyped-call]
    await user_function("loyalty")(message)

    [parked] = await deployed.queue(poison_queue("loyalty")).peek()
    poisoned = unwrap(parked.content, "loyalty")
    assert poisoned.signal is not None
    assert base64.b64decode(poisoned.signal) == body  # not a byte lost
    assert poisoned.info["error_type"] == "MalformedSignal"


@pytest.mark.azurite
async def test_health_function_answers_against_azurite(deployed: AzureStorageAccount) -> None:
    health = user_function("health")
    response = await health(func.HttpRequest("GET", "/api/health", body=b""))
    assert response.status_code == 200
    assert json.loads(response.get_body())["healthy"] is True


def test_host_json_expects_base64_bodies_as_the_queue_adapter_writes_them() -> None:
    with open(REPO_ROOT / "host.json") as f:
        host = json.load(f)
    assert host["extensions"]["queues"]["messageEncoding"] == "base64"


def test_the_ingress_route_takes_posts_with_a_function_key() -> None:
    trigger = declared_functions()["ingress"].get_trigger()
    assert trigger.get_binding_name() == "httpTrigger"
    assert trigger.route == "messages"
    assert [m.value for m in trigger.methods] == ["POST"]
    assert trigger.auth_level == func.AuthLevel.FUNCTION


def test_the_cleanup_timer_reads_its_schedule_from_an_app_setting_with_a_sample_value() -> None:
    trigger = declared_functions()["cleanup"].get_trigger()
    assert trigger.get_binding_name() == "timerTrigger"
    assert trigger.schedule == "%CLEANUP_SCHEDULE%"
    with open(REPO_ROOT / "local.settings.sample.json") as f:
        sample = json.load(f)["Values"]["CLEANUP_SCHEDULE"]
    schedule = Schedule.parse(sample)
    start = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert schedule.next_after(start) == datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


@pytest.mark.azurite
async def test_the_cleanup_timer_function_runs_one_pass(deployed: AzureStorageAccount) -> None:
    await user_function("cleanup")(TimerRequest())
    # Once a message and everything it caused are processed, a pass (grace 0) retires its
    # outbox record.
    await (
        SAMPLE.bus()
        .client("cli")
        .send(
            PlaceOrder(order_id="fa-2", customer="ada", amount_cents=100),
            to="orders",
            idempotency_key="fa-2",
        )
    )
    assert await deliver_all(deployed) == 8
    orders = deployed.table("orders")
    assert [e async for e in orders.query_all(partition_key="fa-2", row_key_prefix="outbox|")]
    await SAMPLE.cleanup(grace_seconds=0)
    assert [e async for e in orders.query_all(partition_key="fa-2", row_key_prefix="outbox|")] == []


async def test_the_cleanup_timer_logs_one_summary_line_at_info_and_the_report_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    account = MemoryStorageAccount()
    worker = runtime.Worker(sample_app, sample_settings(), account)
    await provision(account, worker.resources)
    await worker.serving()  # the start-up subscription, whose lines are not the cleanup's
    timer = declared_functions(worker)["cleanup"].get_user_function()

    with caplog.at_level(logging.DEBUG):
        await timer(TimerRequest())

    cleanup = [r for r in caplog.records if r.name.startswith("shared.")]
    [info] = [r for r in cleanup if r.levelno >= logging.INFO]
    assert re.fullmatch(
        r"cleanup: removed 0, kept 0; \d+ tasks in \d+\.\d s, complete", info.getMessage()
    )
    [report] = [r.getMessage() for r in cleanup if r.getMessage().startswith("cleanup report ")]
    assert json.loads(report.removeprefix("cleanup report "))["complete"] is True
    assert all(r.levelno == logging.DEBUG for r in cleanup if r is not info)


async def test_a_queue_function_keeps_the_insertion_time_the_host_binds_in_a_poison_reason() -> (
    None
):
    account = MemoryStorageAccount()
    worker = runtime.Worker(sample_app, sample_settings(), account)
    await provision(account, worker.resources)
    loyalty = declared_functions(worker)["loyalty"].get_user_function()
    inserted = datetime(2026, 11, 23, 15, 50, 37, tzinfo=UTC)

    await loyalty(
        QueueMessage(  # type: ignore[no-untyped-call]
            id="m", body=b"not a signal", dequeue_count=1, insertion_time=inserted
        )
    )

    [parked] = await account.queue(poison_queue("loyalty")).peek()
    info = unwrap(parked.content, "loyalty").info
    assert (info["error_type"], info["enqueued_at"]) == (
        "MalformedSignal",
        "2026-11-23T15:50:37+00:00",
    )
    assert datetime.fromisoformat(info["failed_at"]) >= inserted


def test_the_function_app_refuses_an_ambiguous_storage_connection_at_start_up(
    tmp_path: Path,
) -> None:
    """A connection string added by hand beside the identity-based group infra/ sets: the
    two may name different accounts, and the worker must not pick one in silence."""
    result = index_function_app(
        tmp_path,
        AzureWebJobsStorage="UseDevelopmentStorage=true",
        AzureWebJobsStorage__accountName="prodshop",
    )
    assert result.returncode != 0
    assert (
        "ambiguous storage connection: AzureWebJobsStorage is set as a connection string in "
        "the environment, and its account is also set by location "
        "(AzureWebJobsStorage__accountName in the environment)"
    ) in result.stderr
