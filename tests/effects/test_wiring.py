"""The product's performer (``shared.effects.wiring``): a worker built by the runtime for an
app that declares services calls them over HTTP at the configured address, with the
configured credential and the idempotency key; its queue trigger, resources and health see
the performer like any endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import azure.functions as func
import pytest

from shared import runtime
from shared.bindings import blueprint
from shared.bus import BusApp, HandlerContext, Outcome
from shared.bus.effects import PERFORMER_ENDPOINT, EffectAnswered
from shared.config import build_config
from shared.effects.memory import InMemoryProvider
from shared.effects.performer import add_performer
from shared.errors import ConfigurationError
from shared.provisioning import provision
from shared.settings import resolve_settings
from shared.stores.memory import MemoryStorageAccount
from tests.effects.http_servers import KeyedProvider, serving
from tests.effects.test_performer import Order, PlaceOrder

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk_live_wired_5e9b"


class RefundAnswered(EffectAnswered):
    pass


def shop() -> BusApp:
    """An app as a user writes it: a module-level object declaring a service."""
    app = BusApp()
    orders = app.endpoint("orders", Order)

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        key = ctx.request_effect(
            service="card-payments",
            operation="refund",
            body={"amount": cmd.amount},
            answer=RefundAnswered,
        )
        ctx.state.requested.append(key)

    @orders.handles(RefundAnswered)
    def answered(ctx: HandlerContext[Order], answer: RefundAnswered) -> None:
        ctx.state.answers.append((answer.key, answer.outcome))

    app.service("card-payments", operations={"refund": "/v1/refunds"}, idempotency_header="Idem")
    return app


def worker(app: BusApp, **values: str) -> runtime.Worker:
    settings = resolve_settings(environ=values, local_file=None)
    return runtime.Worker(app, build_config(settings, root=REPO), MemoryStorageAccount())


async def drain(worker: runtime.Worker) -> None:
    account = worker.account()
    for _ in range(20):
        busy = False
        for endpoint in worker.app.endpoints:
            for signal in await account.queue(endpoint).receive(16, visibility_timeout=30):
                busy = True
                outcome = await worker.receive(endpoint, signal.content.encode(), 1)
                assert outcome is Outcome.PROCESSED, (endpoint, outcome)
                await account.queue(endpoint).delete(signal.id, signal.pop_receipt)
        if not busy:
            return
    raise AssertionError("the queues did not drain")


async def test_a_runtime_worker_calls_the_configured_address_with_credential_and_key() -> None:
    app = shop()
    async with serving(KeyedProvider(key_header="Idem")) as server:
        built = worker(
            app,
            BUS_SERVICE_CARD_PAYMENTS_URL=server.url + "/",
            BUS_SERVICE_CARD_PAYMENTS_CREDENTIAL=SECRET,
        )
        await provision(built.account(), built.resources)
        await (
            built.bus()
            .client()
            .send(PlaceOrder(order="o1", amount=700), to="orders", idempotency_key="o1")
        )
        async with asyncio.timeout(30):
            await drain(built)
        await built.close()
    [key] = server.ledger
    [received] = server.received
    assert received.path == "/v1/refunds"
    assert received.headers["authorization"] == f"Bearer {SECRET}"
    assert received.headers["idem"] == key
    assert json.loads(received.body) == {"amount": 700}
    states = [row async for row in built.bus().endpoint_state("orders").states()]
    [order] = [Order.model_validate_json(row.data) for row in states if row.partition_key == "o1"]
    assert order.answers == [(key, "succeeded")]


def test_the_performer_has_its_queue_trigger_resources_and_table() -> None:
    built = worker(shop(), BUS_SERVICE_CARD_PAYMENTS_URL="https://pay.example")
    assert PERFORMER_ENDPOINT in built.resources.endpoints
    bindings = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    bindings.register_functions(blueprint(built))
    names = {str(f.get_function_name()) for f in bindings.get_functions()}
    assert {"orders", PERFORMER_ENDPOINT} <= names


def test_a_second_worker_for_the_same_app_adds_nothing_and_shares_the_client() -> None:
    app = shop()
    first = worker(app, BUS_SERVICE_CARD_PAYMENTS_URL="https://pay.example")
    second = worker(app, BUS_SERVICE_CARD_PAYMENTS_URL="https://pay.example")
    assert list(app.endpoints) == ["orders", PERFORMER_ENDPOINT]
    assert first.http is not None
    assert second.http is first.http


def test_a_declared_service_without_its_url_stops_the_worker_naming_the_setting() -> None:
    app = shop()
    with pytest.raises(
        ConfigurationError, match="set the app setting BUS_SERVICE_CARD_PAYMENTS_URL"
    ):
        worker(app, BUS_SERVICE_CARD_PAYMENTS_CREDENTIAL=SECRET)
    assert list(app.endpoints) == ["orders"]


def test_an_app_with_its_own_performer_keeps_it() -> None:
    app = shop()
    add_performer(app, {"card-payments": InMemoryProvider()}, call_timeout=5.0)
    performer = app.endpoints[PERFORMER_ENDPOINT]
    built = worker(app)
    assert built.http is None
    assert app.endpoints[PERFORMER_ENDPOINT] is performer


def test_an_endpoint_of_the_app_named_like_the_performer_is_refused() -> None:
    app = shop()
    app.endpoint(PERFORMER_ENDPOINT)
    with pytest.raises(ConfigurationError, match="rename the endpoint"):
        worker(app, BUS_SERVICE_CARD_PAYMENTS_URL="https://pay.example")


def test_two_services_that_would_read_the_same_settings_are_refused() -> None:
    app = shop()
    app.service("card_payments", operations={"refund": "/v1/refunds"})
    with pytest.raises(ConfigurationError, match="would both read BUS_SERVICE_CARD_PAYMENTS_URL"):
        worker(app, BUS_SERVICE_CARD_PAYMENTS_URL="https://pay.example")


def test_a_function_timeout_that_leaves_no_time_for_a_call_stops_start_up(tmp_path: Path) -> None:
    host = json.loads((REPO / "host.json").read_text()) | {"functionTimeout": "00:00:30"}
    (tmp_path / "host.json").write_text(json.dumps(host))
    settings = resolve_settings(
        environ={"BUS_SERVICE_CARD_PAYMENTS_URL": "https://pay.example"}, local_file=None
    )
    with pytest.raises(ConfigurationError, match="functionTimeout leaves no time"):
        runtime.Worker(shop(), build_config(settings, root=tmp_path), MemoryStorageAccount())


def test_an_app_without_services_gets_no_performer() -> None:
    app = BusApp()
    app.endpoint("orders")
    assert worker(app).http is None
    assert list(app.endpoints) == ["orders"]


SHOP = shop()
"""The app the ``bus`` command below loads (``BUS_APP``), a module-level global as a user's."""


def run_bus(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``bus`` in a process of its own, from an empty folder, with only ``settings``."""
    environ = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **settings}
    return subprocess.run(
        [sys.executable, "-m", "shared.cli", "--no-progress", *args],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bus_resources_lists_the_performer_of_an_app_that_declares_services(
    tmp_path: Path,
) -> None:
    app = "tests.effects.test_wiring:SHOP"
    listed = run_bus(
        tmp_path, "--app", app, "resources", BUS_SERVICE_CARD_PAYMENTS_URL="https://pay.example"
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["endpoints"] == ["orders", PERFORMER_ENDPOINT]
    unset = run_bus(tmp_path, "--app", app, "resources")
    assert unset.returncode == 3
    assert "set the app setting BUS_SERVICE_CARD_PAYMENTS_URL" in unset.stderr
