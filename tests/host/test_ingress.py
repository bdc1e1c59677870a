"""HTTP ingress: exactly one send per Idempotency-Key, clear 400s, 413 and key checks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import RawTestServer, TestClient

from lab.host.functions import load_functions
from lab.host.http import HttpFrontEnd, Keys
from shared import http_ingress, runtime
from shared.bus import Bus, BusConfig
from shared.bus.envelope import Envelope, Signal
from shared.bus.ingress import INGRESS_ROW
from shared.errors import InvalidName
from shared.provisioning import provision
from shared.sample.app import OrderPlaced, PlaceOrder
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity

REPO = Path(__file__).resolve().parents[2]
ORDER: dict[str, Any] = {
    "type": "PlaceOrder",
    "to": "orders",
    "body": {"order_id": "o1", "customer": "ada", "amount_cents": 1250},
}


@pytest.fixture
async def bus() -> Bus:
    account = MemoryStorageAccount()
    worker = runtime.Worker.for_account(account)
    await provision(account, worker.resources)
    bus = worker.bus()
    await bus.subscribe_all()
    return bus


async def post(
    bus: Bus, payload: object, key: str | None = "k1", raw: bytes | None = None
) -> http_ingress.Answer:
    headers = {} if key is None else {"idempotency-key": key}  # header names are case-blind
    return await http_ingress.handle(
        bus, headers, raw if raw is not None else json.dumps(payload).encode()
    )


async def test_a_new_key_sends_once_and_a_repeat_gets_the_same_receipt(bus: Bus) -> None:
    first = await post(bus, ORDER)
    assert first.status == 202
    assert first.body["deduplicated"] is False
    [message_id] = first.body["message_ids"]
    again = await post(bus, ORDER)
    assert again.status == 200
    assert again.body == {**first.body, "deduplicated": True}
    # The repeat re-sends the committed signal (harmless: one token, one processing) and
    # never creates a new message.
    signals = await bus.account.queue("orders").peek()
    assert [json.loads(m.content)["message_id"] for m in signals] == [message_id] * 2


async def test_an_event_is_published_to_every_subscriber(bus: Bus) -> None:
    event = {
        "type": "OrderPlaced",
        "body": {"order_id": "o2", "customer": "bob", "amount_cents": 300},
    }
    answer = await post(bus, event, key="evt-1")
    assert answer.status == 202
    assert len(answer.body["message_ids"]) == 2  # loyalty and shipping
    assert await bus.account.queue("loyalty").approximate_count() == 1
    assert await bus.account.queue("shipping").approximate_count() == 1


async def test_a_command_goes_to_its_only_handler_when_to_is_left_out(bus: Bus) -> None:
    answer = await post(bus, {"type": "FireAt", "body": {"game_id": "g", "position": 3}})
    assert answer.status == 202
    assert await bus.account.queue("shootingrange").approximate_count() == 1


@pytest.mark.parametrize(
    ("payload", "key", "message"),
    [
        (ORDER, None, "the Idempotency-Key header is required"),
        (ORDER, "bad/key", "Idempotency key"),
        (ORDER, "x" * 201, "idempotency key must be 1-200 characters"),
        ("not an object", "k", "the body must be a JSON object"),
        (
            {"type": "Nope", "body": {}},
            "k",
            "unknown message type 'Nope'; known types: ChargeAnswered, ChargePayment",
        ),
        ({"body": {}}, "k", "'type' (the message type name) is required"),
        (
            {"type": "PlaceOrder", "to": "orders", "body": {"order_id": "o"}},
            "k",
            "invalid PlaceOrder: customer: Field required",
        ),
        (
            {**ORDER, "body": {**ORDER["body"], "amount_cents": 0}},
            "k",
            "amount_cents: Input should be greater than 0",
        ),
        ({**ORDER, "to": "payments"}, "k", "endpoint 'payments' does not handle PlaceOrder"),
        (
            {"type": "Hit", "to": "leaderboard", "body": {"game_id": "g", "position": 1}},
            "k",
            "Hit is an event",
        ),
        ({**ORDER, "extra": 1}, "k", "unexpected fields ['extra']"),
        ({**ORDER, "body": [1]}, "k", "'body' must be a JSON object"),
    ],
)
async def test_bad_input_is_a_400_that_says_what_is_wrong(
    bus: Bus, payload: object, key: str | None, message: str
) -> None:
    answer = await post(bus, payload, key=key)
    assert answer.status == 400
    assert message in answer.body["error"]
    assert await bus.account.queue("orders").approximate_count() == 0


@pytest.mark.parametrize("partition", ["a/b", "a\\b", "a#b", "a?b", "nl\n", "x" * 513])
async def test_every_ingress_client_refuses_a_partition_key_storage_refuses(
    bus: Bus, partition: str
) -> None:
    """Not only HTTP: the CLI and batch jobs send through the same client."""
    client = bus.client("cli")
    command = PlaceOrder(order_id=partition, customer="ada", amount_cents=1)
    with pytest.raises(InvalidName, match="PlaceOrder has an unusable partition key"):
        await client.send(command, to="orders", idempotency_key="k1")
    event = OrderPlaced(order_id="o", customer=partition, amount_cents=1)
    with pytest.raises(InvalidName, match="OrderPlaced has an unusable partition key"):
        await client.publish(event, idempotency_key="k2")
    for queue in ("orders", "loyalty", "shipping"):
        assert await bus.account.queue(queue).approximate_count() == 0
    assert (await bus.account.table(bus.config.ingress_table).query()).entities == []
    assert [b async for b in bus.account.blob_container(bus.config.tokens_container).list()] == []


async def test_a_key_with_a_comma_is_a_400_and_nothing_is_recorded(bus: Bus) -> None:
    # "a, b" is what a function receives for two Idempotency-Key headers: either key, or
    # both as one, could name a message the client meant under the other.
    answer = await post(bus, ORDER, key="order-1, order-2")
    assert answer.status == 400
    assert "one Idempotency-Key header" in answer.body["error"]
    assert await bus.account.queue("orders").peek() == []
    for key in ("order-1", "order-2"):
        assert (await post(bus, ORDER, key=key)).status == 202  # neither key was used


async def test_bad_json_is_a_400(bus: Bus) -> None:
    answer = await post(bus, None, raw=b"{not json")
    assert (answer.status, answer.body["error"]) == (
        400,
        'the body must be JSON: {"type": ..., "body": {...}}',
    )


async def test_an_oversized_body_is_a_413_before_anything_is_read(bus: Bus) -> None:
    huge = b"x" * (bus.config.max_payload_bytes + http_ingress.ENVELOPE_SLACK_BYTES + 1)
    assert (await post(bus, None, raw=huge)).status == 413


async def test_a_message_over_the_payload_limit_is_a_413(bus: Bus) -> None:
    small = Bus(bus.app, bus.account, BusConfig(max_payload_bytes=100))
    payload = {**ORDER, "body": {**ORDER["body"], "customer": "c" * 200}}
    answer = await post(small, payload)
    assert answer.status == 413
    assert "limit is 100" in answer.body["error"]


@pytest.fixture
async def served(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TestClient[Any, Any]]:
    """The real function_app.py's HTTP functions behind the local host's front end, with
    the process's worker on in-memory storage."""
    monkeypatch.setattr(runtime, "_worker", runtime.Worker.for_account(bus.account))
    loaded = load_functions(REPO / "function_app.py", {"CLEANUP_SCHEDULE": "0 */5 * * * *"})
    front = HttpFrontEnd(loaded.http, Keys("fn", "master"), function_timeout=10)
    client: TestClient[Any, Any]
    async with TestClient(RawTestServer(front.dispatch)) as client:
        yield client


async def test_a_post_over_the_payload_limit_is_a_413_naming_it_and_sends_nothing(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    """Issue 35: the entry points refuse input over a limit before writing anything."""
    order = {**ORDER, "body": {**ORDER["body"], "customer": "c" * 17_000_000}}
    response = await served.post(
        "/api/messages?code=fn", json=order, headers={"Idempotency-Key": "http-big"}
    )
    assert response.status == 413
    error = (await response.json())["error"]
    assert "the limit is 16,781,312 bytes (BUS_MAX_PAYLOAD_BYTES and 4,096" in error
    assert await bus.account.queue("orders").approximate_count() == 0
    assert (await bus.account.table(bus.config.ingress_table).query()).entities == []
    assert [b async for b in bus.account.blob_container(bus.config.tokens_container).list()] == []


async def test_a_body_field_a_newer_client_added_is_dropped_over_http(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    """Issue 29: a client of a newer version may send a field this version's model does not
    know yet (the request's own fields are still checked: see the 400s above)."""
    order = {**ORDER, "body": {**ORDER["body"], "coupon": "WINTER", "x" * 5000: 1}}
    response = await served.post(
        "/api/messages?code=fn", json=order, headers={"Idempotency-Key": "http-newer"}
    )
    assert response.status == 202, await response.text()
    [signal] = await bus.account.queue("orders").peek()
    token = Signal.parse(signal.content).token
    envelope = Envelope.from_bytes(
        (await bus.account.blob_container(bus.config.tokens_container).read(token)).data
    )
    assert envelope.body == PlaceOrder.model_validate(ORDER["body"]).model_dump(mode="json")


async def test_the_ingress_function_answers_over_http_with_function_keys(
    served: TestClient[Any, Any],
) -> None:
    headers = {"Idempotency-Key": "http-1"}
    assert (await served.post("/api/messages", json=ORDER, headers=headers)).status == 401
    response = await served.post(
        "/api/messages", json=ORDER, headers={**headers, "x-functions-key": "fn"}
    )
    assert response.status == 202
    receipt = await response.json()
    response = await served.post("/api/messages?code=fn", json=ORDER, headers=headers)
    assert (response.status, (await response.json())["message_ids"]) == (
        200,
        receipt["message_ids"],
    )
    other = {**ORDER, "body": {**ORDER["body"], "amount_cents": 1}}
    response = await served.post("/api/messages?code=fn", json=other, headers=headers)
    assert response.status == 409  # the key already names another message
    assert "'http-1' was already used for a different message" in (await response.json())["error"]
    response = await served.post("/api/messages?code=fn", data=b"[", headers=headers)
    assert response.status == 400
    assert response.content_type == "application/json"
    big = b"x" * (17 * 1024 * 1024)
    assert (await served.post("/api/messages?code=fn", data=big, headers=headers)).status == 413
    assert (await served.get("/api/messages?code=fn")).status == 405


async def test_a_key_whose_record_a_newer_version_wrote_is_a_503_to_retry_and_sends_nothing(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    """During a rolling deploy the client's retry reaches an upgraded instance: this one
    neither answers from the record nor overwrites it."""
    table = bus.account.table(bus.config.ingress_table)
    newer = Entity("http-newer", INGRESS_ROW, {"format": 3, "shape": "unknown to this version"})
    await table.insert(newer)

    response = await served.post(
        "/api/messages?code=fn", json=ORDER, headers={"Idempotency-Key": "http-newer"}
    )

    assert response.status == 503
    assert response.headers["Retry-After"] == str(http_ingress.RETRY_AFTER_SECONDS)
    error = (await response.json())["error"]
    assert "format version 3" in error
    assert "retry with the same Idempotency-Key" in error
    assert (await table.get("http-newer", INGRESS_ROW)).properties == newer.properties
    assert await bus.account.queue("orders").approximate_count() == 0
    assert [b async for b in bus.account.blob_container(bus.config.tokens_container).list()] == []


async def test_a_retry_of_a_request_another_version_of_the_app_recorded_is_answered_over_http(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    """Issue 29: during a rolling deploy the key's record may hold the message as another
    version of the app's model saw it (a field added with a default changes that view: here
    its fingerprint is replaced). The request as the client sent it still identifies the
    retry, through the function as through any client."""
    headers = {"Idempotency-Key": "http-rolled"}
    first = await served.post("/api/messages?code=fn", json=ORDER, headers=headers)
    assert first.status == 202
    table = bus.account.table(bus.config.ingress_table)
    written = await table.get("http-rolled", INGRESS_ROW)
    seen_otherwise = {**written.properties, "fingerprint": "0" * 64}
    await table.update(Entity(written.partition_key, INGRESS_ROW, seen_otherwise))

    again = await served.post("/api/messages?code=fn", json=ORDER, headers=headers)

    assert again.status == 200
    assert (await again.json())["message_ids"] == (await first.json())["message_ids"]
    other = {**ORDER, "body": {**ORDER["body"], "amount_cents": 1}}
    refused = await served.post("/api/messages?code=fn", json=other, headers=headers)
    assert refused.status == 409
    tokens = bus.account.blob_container(bus.config.tokens_container)
    assert len([b async for b in tokens.list()]) == 1  # nothing sent twice
