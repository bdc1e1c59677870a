"""The sample's ``POST /api/orders`` (``shared.sample.storefront``): the order row and its
PlaceOrder commit together in one session, on Table Storage (Azurite) and with the row in the
sample's own PostgreSQL table; called through the HTTP function the blueprint binds, as the
host calls it, and the order flow run by the queue functions' worker."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import azure.functions as func
import pytest

from lab.local.azurite import AzuriteEndpoints
from lab.local.payments import Provider
from shared import runtime
from shared.bindings import blueprint
from shared.http_ingress import handle
from shared.platform_identity import PRINCIPAL_ID, PRINCIPAL_IDP
from shared.provisioning import provision
from shared.sample.app import build_app
from shared.sample.storefront import ORDER_ROW, ORDERS_SCHEMA, STOREFRONT, STOREFRONT_STORE
from tests.conftest import sample_settings, unique_name

pytestmark = pytest.mark.azurite


async def started(worker: runtime.Worker) -> runtime.Worker:
    """``worker`` on freshly provisioned storage; the sample's names are fixed, so its queues
    are emptied first."""
    account = worker.account()
    await provision(account, worker.resources)
    for queue in worker.resources.queue_names:
        await account.queue(queue).clear()
    await worker.serving()
    return worker


@pytest.fixture
async def on_tables(
    azurite: AzuriteEndpoints, sample_provider: Provider
) -> AsyncIterator[runtime.Worker]:
    settings = sample_settings(AzureWebJobsStorage=azurite.connection_string)
    worker = await started(runtime.Worker(build_app(), settings))
    yield worker
    await worker.close()


@pytest.fixture
async def on_postgres(
    azurite: AzuriteEndpoints,
    postgres: str,
    sample_provider: Provider,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[runtime.Worker]:
    monkeypatch.setenv(STOREFRONT_STORE, "postgres")  # read when the app declares its endpoints
    settings = sample_settings(
        AzureWebJobsStorage=azurite.connection_string, BUS_POSTGRES_URL=postgres
    )
    connection = await asyncpg.connect(postgres)
    try:
        await connection.execute(ORDERS_SCHEMA)
    finally:
        await connection.close()
    worker = await started(runtime.Worker(build_app(), settings))
    yield worker
    await worker.close()


async def place(
    worker: runtime.Worker, body: object, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """``POST /api/orders`` through the function the blueprint binds, as the host calls it."""
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_functions(blueprint(worker))
    [function] = [f for f in app.get_functions() if f.get_function_name() == "accept_order"]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = func.HttpRequest("POST", "http://localhost/api/orders", headers=headers, body=raw)
    response = await function.get_user_function()(request)
    return response.status_code, json.loads(response.get_body())


MESSAGES_PER_ORDER = 8
"""PlaceOrder, OrderPlaced twice, ChargePayment, its EffectRequest, ChargeAnswered, ShipOrder
and OrderShipped (which completes the order's checkout)."""


async def deliver_all(worker: runtime.Worker) -> int:
    """Every queued message to its endpoint's worker until the queues are quiet, as the queue
    functions would; how many were delivered."""
    account, delivered = worker.account(), 0
    for _ in range(20):
        busy = False
        for endpoint in worker.app.endpoints:
            queue = account.queue(endpoint)
            for message in await queue.receive(32, visibility_timeout=30):
                busy = True
                await worker.receive(endpoint, message.content.encode(), message.dequeue_count)
                await queue.delete(message.id, message.pop_receipt)
                delivered += 1
        if not busy:
            return delivered
    raise AssertionError("the queues did not drain")


def new_order() -> dict[str, Any]:
    return {"order_id": unique_name("web-"), "customer": unique_name("c"), "amount_cents": 1250}


async def checkout(worker: runtime.Worker, order_id: str) -> dict[str, Any]:
    """The order's checkout, a saga instance of ``orders``, as stored ({}: none)."""
    rows = worker.bus().endpoint_state("orders").rows()
    found = await rows.read(order_id, ["state"])
    return dict(json.loads(str(found["state"]["data"]))) if found else {}


async def customer_orders(worker: runtime.Worker, customer: str) -> int:
    found = await worker.bus().endpoint_state("loyalty").rows().read(customer, ["state"])
    return int(json.loads(str(found["state"]["data"]))["orders"]) if found else 0


async def order_rows(worker: runtime.Worker, order_id: str) -> int:
    """The order's rows where the storefront keeps them: its table's entity, or the sample's
    own SQL table."""
    if worker.app.get(STOREFRONT).store == "table":
        rows = worker.bus().endpoint_state(STOREFRONT).rows()
        return len(await rows.read(order_id, [ORDER_ROW]))
    url = worker.app_config.postgres.url_for(STOREFRONT)
    connection = await asyncpg.connect(url)
    try:
        count = "SELECT count(*) FROM sample_orders WHERE order_id = $1"
        return int(await connection.fetchval(count, order_id))
    finally:
        await connection.close()


async def placed_once(worker: runtime.Worker) -> None:
    order = new_order()
    key = {"Idempotency-Key": unique_name("key-")}
    status, first = await place(worker, order, key)
    assert (status, first["deduplicated"], len(first["message_ids"])) == (202, False, 1)
    assert await order_rows(worker, order["order_id"]) == 1
    assert await deliver_all(worker) == MESSAGES_PER_ORDER
    assert (await checkout(worker, order["order_id"]))["completed_at"]
    assert await customer_orders(worker, order["customer"]) == 1

    status, again = await place(worker, {**order, "amount_cents": 99}, key)
    assert (status, again) == (200, {**first, "deduplicated": True})
    assert await deliver_all(worker) == 0  # signalled already: nothing is sent again
    assert await order_rows(worker, order["order_id"]) == 1
    assert await customer_orders(worker, order["customer"]) == 1

    status, other = await place(worker, order, {"Idempotency-Key": unique_name("key-")})
    assert status == 409, other  # the same order under another key: a conflict, not a copy
    assert await deliver_all(worker) == 0


async def test_an_order_commits_its_row_and_is_processed_once_on_tables(
    on_tables: runtime.Worker,
) -> None:
    await placed_once(on_tables)


@pytest.mark.postgres
async def test_an_order_commits_its_row_and_is_processed_once_in_postgres(
    on_postgres: runtime.Worker,
) -> None:
    assert on_postgres.app.get(STOREFRONT).store == "postgres"
    await placed_once(on_postgres)


BAD_BODIES = [
    b"not json",
    b'{"order_id": "o1", "customer": "ada"}',
    b'{"order_id": "o1", "customer": "ada", "amount_cents": "1250"}',
    b'{"order_id": "o1", "customer": "ada", "amount_cents": 0}',
    b'{"order_id": "o/1", "customer": "ada", "amount_cents": 5}',
    b'{"order_id": "o1", "customer": "a#b", "amount_cents": 5}',
    b'{"order_id": "o1", "customer": "\\udcff", "amount_cents": 5}',
    b'{"order_id": "o1", "customer": "ada", "amount_cents": 5, "admin": true}',
    b'{"order_id": "o1", "customer": "ada", "amount_cents": 5' + b" " * 70_000 + b"}",
]


async def test_a_bad_body_is_a_4xx_and_writes_and_sends_nothing(
    on_tables: runtime.Worker,
) -> None:
    for body in BAD_BODIES:
        status, answer = await place(on_tables, body, {"Idempotency-Key": unique_name("k")})
        assert status in (400, 413), (body[:80], answer)
        assert "Traceback" not in answer["error"]
    assert await order_rows(on_tables, "o1") == 0
    rows = on_tables.bus().endpoint_state(STOREFRONT).rows()
    written = [e.row_key async for e in rows.every() if e.partition_key == "o1"]
    assert written == []  # not even a session's record
    assert await deliver_all(on_tables) == 0


FORGED = {PRINCIPAL_ID: "00000000-0000-0000-0000-0000000000aa", PRINCIPAL_IDP: "aad"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Idempotency-Key": "k" * 201},
        {"Idempotency-Key": "k\x01"},
        {"Idempotency-Key": "bad/key"},
        {"Idempotency-Key": "first, second"},
    ],
)
async def test_an_attackers_key_is_refused_as_the_ingress_refuses_it(
    on_tables: runtime.Worker, headers: dict[str, str]
) -> None:
    order = new_order()
    status, answer = await place(on_tables, order, headers)
    ingress = await handle(on_tables.bus(), headers, b"{}")
    assert (status, answer) == (ingress.status, ingress.body) == (400, ingress.body)
    assert await order_rows(on_tables, order["order_id"]) == 0
    assert await deliver_all(on_tables) == 0


async def test_forged_identity_headers_do_not_make_a_retry_a_new_order(
    on_tables: runtime.Worker,
) -> None:
    """Without App Service authentication the principal headers are the caller's own words:
    they name no scope of their own, so the same key is the same request."""
    order, key = new_order(), {"Idempotency-Key": unique_name("key-")}
    _, first = await place(on_tables, order, key)
    status, again = await place(on_tables, order, {**key, **FORGED})
    assert (status, again["message_ids"]) == (200, first["message_ids"])
    assert await deliver_all(on_tables) == MESSAGES_PER_ORDER


@pytest.fixture
async def entra_callers(
    azurite: AzuriteEndpoints, sample_provider: Provider
) -> AsyncIterator[runtime.Worker]:
    """The sample behind App Service authentication, each Entra caller's keys its own."""
    settings = sample_settings(
        AzureWebJobsStorage=azurite.connection_string,
        BUS_INGRESS_ENTRA_CALLERS="true",
        WEBSITE_AUTH_ENABLED="True",
    )
    worker = await started(runtime.Worker(build_app(), settings))
    yield worker
    await worker.close()


def caller(object_id: str) -> dict[str, str]:
    """The principal headers the platform sets for a caller it signed in."""
    return {PRINCIPAL_ID: object_id, PRINCIPAL_IDP: "aad"}


async def test_one_callers_key_never_answers_another(entra_callers: runtime.Worker) -> None:
    """As at the ingress: the same key from another caller is another request, which must not
    learn the first one's message ids; here its order exists, so it is a conflict."""
    order, key = new_order(), {"Idempotency-Key": unique_name("key-")}
    first_caller = caller("00000000-0000-0000-0000-00000000000a")
    status, first = await place(entra_callers, order, {**key, **first_caller})
    assert status == 202
    status, again = await place(entra_callers, order, {**key, **first_caller})
    assert (status, again["message_ids"]) == (200, first["message_ids"])
    second = caller("00000000-0000-0000-0000-00000000000b")
    status, other = await place(entra_callers, order, {**key, **second})
    assert status == 409
    assert first["message_ids"][0] not in json.dumps(other)
    status, unsigned = await place(entra_callers, order, key)
    assert status == 401, unsigned
    assert await deliver_all(entra_callers) == MESSAGES_PER_ORDER
