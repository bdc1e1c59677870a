"""The function app's bindings, exercised without the Functions host."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import azure.functions as func
import pytest
from azure.functions.queue import QueueMessage
from azure.functions.timer import TimerRequest

import function_app
from shared import runtime
from shared.bus.poison import unwrap
from shared.host.ncrontab import Schedule
from shared.local.azurite import AzuriteEndpoints
from shared.provisioning import provision
from shared.resources import load_resources, poison_queue
from shared.sample.app import PlaceOrder
from shared.sample.app import app as sample_app
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.infra.provisioned import provisioned_resources


def declared_functions() -> dict[str, Any]:
    functions = {f.get_function_name(): f for f in function_app.app.get_functions()}
    function_app.app.functions_bindings = None  # get_functions() may only be called once
    return functions


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


def test_every_queue_table_and_container_the_app_uses_is_provisioned_by_the_templates() -> None:
    provisioned = provisioned_resources()
    resources = load_resources()
    used = {("queue", q) for q in queue_triggers().values()}
    used |= {("queue", poison_queue(q)) for q in queue_triggers().values()}
    used |= {("table", e) for e in sample_app.endpoints}
    used |= {("table", resources.tables["ingress"])}
    used |= {("container", resources.containers[c]) for c in ("tokens", "topics", "parked")}
    assert used - provisioned == set()


def test_the_health_route_is_declared() -> None:
    trigger = declared_functions()["health"].get_trigger()
    assert trigger.get_binding_name() == "httpTrigger"
    assert trigger.name == "req"


async def test_health_reports_missing_resources_then_healthy_once_provisioned() -> None:
    account = MemoryStorageAccount()
    status, body = await runtime.health(account)
    assert status == 503
    assert "queue orders" in json.loads(body)["missing"]

    await provision(account, load_resources())
    status, body = await runtime.health(account)
    assert status == 200
    assert json.loads(body)["checked"] > 10


@pytest.fixture
async def deployed(
    azurite: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AzureStorageAccount]:
    """The function app's runtime pointed at a freshly provisioned Azurite.

    The sample app's names are fixed, so the emulator's queues are cleared first."""
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    monkeypatch.setattr(runtime, "_account", None)
    monkeypatch.setattr(runtime, "_bus", None)
    monkeypatch.setattr(runtime, "_ingress_bus", None)
    account = runtime.storage_account()
    assert isinstance(account, AzureStorageAccount)
    await provision(account, load_resources())
    for queue in load_resources().queue_names:
        await account.queue(queue).clear()
    await runtime.bus().subscribe_all()
    yield account
    await account.close()


async def deliver_all(deployed: AzureStorageAccount) -> int:
    """Call the declared queue functions with every message until the queues are quiet, as
    the host would: base64-decoded body, dequeue count. Returns how many were delivered."""
    functions: dict[str, Callable[..., Any]] = {
        name: getattr(function_app, name) for name in queue_triggers()
    }
    delivered = 0
    for _ in range(10):
        busy = False
        for name, function in functions.items():
            queue = deployed.queue(name)
            for message in await queue.receive(32, visibility_timeout=30):
                busy = True
                await function(
                    QueueMessage(
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
    deployed: AzureStorageAccount,
) -> None:
    """Drive the declared functions as the host would: base64-decoded body, dequeue count."""
    await (
        runtime.bus()
        .client("cli")
        .send(
            PlaceOrder(order_id="fa-1", customer="ada", amount_cents=1250),
            to="orders",
            idempotency_key="fa-1",
        )
    )

    assert await deliver_all(deployed) == 5  # PlaceOrder, OrderPlaced x2, ChargePayment, ShipOrder
    payments = deployed.table("payments")
    [state] = (await payments.query(partition_key="fa-1", row_keys=["state"])).entities
    assert json.loads(str(state["data"]))["amount_cents"] == 1250
    loyalty = deployed.table("loyalty")
    [points] = (await loyalty.query(partition_key="ada", row_keys=["state"])).entities
    assert json.loads(str(points["data"])) == {"orders": 1, "points": 12}


@pytest.mark.azurite
async def test_a_body_that_is_not_utf8_is_parked_whole(deployed: AzureStorageAccount) -> None:
    """On Azure the host hands the function the decoded bytes; they may be anything."""
    body = b'\xff\xfe{"message_id": "\x80"}'

    await function_app.loyalty(QueueMessage(id="m", body=body, dequeue_count=1))

    [parked] = await deployed.queue(poison_queue("loyalty")).peek()
    poisoned = unwrap(parked.content, "loyalty")
    assert poisoned.signal is not None
    assert base64.b64decode(poisoned.signal) == body  # not a byte lost
    assert poisoned.info["error_type"] == "MalformedSignal"


@pytest.mark.azurite
async def test_health_function_answers_against_azurite(deployed: AzureStorageAccount) -> None:
    response = await function_app.health(func.HttpRequest("GET", "/api/health", body=b""))
    assert response.status_code == 200
    assert json.loads(response.get_body())["healthy"] is True


def test_host_json_expects_base64_bodies_as_the_queue_adapter_writes_them() -> None:
    with open("host.json") as f:
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
    with open("local.settings.sample.json") as f:
        sample = json.load(f)["Values"]["CLEANUP_SCHEDULE"]
    schedule = Schedule.parse(sample)
    start = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert schedule.next_after(start) == datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


@pytest.mark.azurite
async def test_the_cleanup_timer_function_runs_one_pass(deployed: AzureStorageAccount) -> None:
    await function_app.cleanup(TimerRequest())
    # Once a message and everything it caused are processed, a pass (grace 0) retires its
    # outbox record.
    await (
        runtime.bus()
        .client("cli")
        .send(
            PlaceOrder(order_id="fa-2", customer="ada", amount_cents=100),
            to="orders",
            idempotency_key="fa-2",
        )
    )
    assert await deliver_all(deployed) == 5
    orders = deployed.table("orders")
    assert [e async for e in orders.query_all(partition_key="fa-2", row_key_prefix="outbox|")]
    await runtime.cleanup_now(deployed, grace_seconds=0)
    assert [e async for e in orders.query_all(partition_key="fa-2", row_key_prefix="outbox|")] == []
