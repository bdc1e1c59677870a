"""The ingress record's two fingerprints (``shared.bus.ingress``, ``Fingerprints``): the
request's, as the client sent it, beside the message's as this version's model sees it.
What each format records, how records written before requests had a fingerprint still
answer, and the request's size bound. Across two versions of an app:
``tests/rolling/test_ingress_retry_across_versions.py``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import http_ingress
from shared.audit.rows import ingress_row
from shared.bus import Bus, BusApp, BusConfig, HandlerContext
from shared.bus.deliveries import decode_signals
from shared.bus.formats import FIRST, NEWEST
from shared.bus.ingress import INGRESS_ROW, REQUEST_FINGERPRINT, request_digest
from shared.clock import ManualClock
from shared.errors import IdempotencyKeyReused
from shared.provisioning import provision
from shared.resources import resources_for
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity
from tests.formats import stored_v1
from tests.formats.test_stored_v1 import entity
from tests.rolling import app_v1

ORDER: dict[str, Any] = {"type": "PlaceOrder", "body": {"order_id": "o-1", "amount_cents": 1250}}
STORED: dict[str, Any] = json.loads(stored_v1.FIXTURE.read_text())
RECORDED_BEFORE = {
    "fingerprint",
    "sender",
    "incoming_id",
    "type",
    "created_at",
    "expires_at",
    "outgoing",
    "abandoned",
}
"""The properties of a record under the raw key in format 1 (``fixtures/stored_v1.json``)."""


async def bus_writing(wire_format: int, **settings: Any) -> Bus:
    account = MemoryStorageAccount()
    await provision(account, resources_for(app_v1.app.endpoints))
    return Bus(app_v1.app, account, BusConfig(wire_format=wire_format, **settings))


async def post(bus: Bus, request: dict[str, Any], key: str) -> http_ingress.Answer:
    return await http_ingress.handle(bus, {"idempotency-key": key}, json.dumps(request).encode())


async def record(bus: Bus, key: str) -> Entity:
    return await bus.account.table(bus.config.ingress_table).get(key, INGRESS_ROW)


@pytest.mark.parametrize("wire_format", [FIRST, NEWEST])
async def test_only_format_2_records_the_request_fingerprint(wire_format: int) -> None:
    bus = await bus_writing(wire_format)
    assert (await post(bus, ORDER, "k1")).status == 202

    written = set((await record(bus, "k1")).properties)

    if wire_format == FIRST:
        assert written == RECORDED_BEFORE  # what releases before format versions wrote
    else:
        assert written == {*RECORDED_BEFORE, "format", REQUEST_FINGERPRINT}


async def test_a_python_callers_send_has_no_request_and_matches_by_the_message() -> None:
    """``Bus.client().send(message)`` has no request: its record has no request fingerprint,
    and a client's retry of the same message (or its send retried by the client) matches by
    the message as the model sees it, as before."""
    bus = await bus_writing(NEWEST)
    message = app_v1.PlaceOrder(order_id="o-1", amount_cents=1250)
    sent = await bus.client("http").send(message, to="orders", idempotency_key="k1")
    assert REQUEST_FINGERPRINT not in (await record(bus, "k1")).properties

    again = await post(bus, ORDER, "k1")

    assert again.status == 200
    assert again.body["message_ids"] == list(sent.message_ids)
    other = {**ORDER, "body": {**ORDER["body"], "amount_cents": 1}}
    assert (await post(bus, other, "k1")).status == 409


async def test_a_record_of_another_reading_of_the_message_answers_the_same_request() -> None:
    """A record another version of the app wrote holds the message as its model read it
    (replaced here by another digest): the same request still matches it by the request's
    fingerprint; another request matches neither (``tests/rolling`` has the real versions)."""
    bus = await bus_writing(NEWEST)
    first = await post(bus, ORDER, "k1")
    written = await record(bus, "k1")
    other_reading = {**written.properties, "fingerprint": "0" * 64}
    table = bus.account.table(bus.config.ingress_table)
    await table.update(Entity(written.partition_key, INGRESS_ROW, other_reading))

    again = await post(bus, ORDER, "k1")

    assert (first.status, again.status) == (202, 200)
    assert again.body["message_ids"] == first.body["message_ids"]
    other = {**ORDER, "body": {**ORDER["body"], "amount_cents": 1}}
    assert (await post(bus, other, "k1")).status == 409


@pytest.mark.parametrize("scoped", [False, True])
async def test_a_record_from_before_request_fingerprints_answers_a_clients_retry(
    scoped: bool,
) -> None:
    """``fixtures/stored_v1.json``'s records (a ``bus send`` of ShipOrder order-17, before
    format versions) answer the same send by ``bus send`` with the first receipt, and refuse
    another message under their key."""
    written = entity(STORED["ingress"]["scoped" if scoped else "unscoped"])
    clock = ManualClock(stored_v1.INGRESS_AT + 60)  # within the record's window
    config = BusConfig(clock=clock, ingress_key_scopes=scoped)
    account = MemoryStorageAccount(clock=clock)
    app = BusApp()

    @app.endpoint("shipping").handles(stored_v1.ShipOrder)
    def ship(ctx: HandlerContext[Any], command: stored_v1.ShipOrder) -> None: ...

    await provision(account, resources_for(app.endpoints))
    await account.table(config.ingress_table).insert(written)
    client = Bus(app, account, config).client("cli")

    async def bus_send(order_id: str) -> Any:
        sent = http_ingress.build_message(
            app, "ShipOrder", {"order_id": order_id}, "shipping", config=config, to_field="--to"
        )
        return await client.submit(
            sent.message, to=sent.to, idempotency_key="order-17", request=sent.request
        )

    receipt = await bus_send("order-17")

    assert receipt.deduplicated
    assert receipt.message_ids == tuple(
        o.message_id for o in decode_signals(str(written["outgoing"]))
    )
    with pytest.raises(IdempotencyKeyReused):
        await bus_send("order-18")


async def test_a_request_over_the_limit_is_refused_before_anything_is_written() -> None:
    """The request is hashed as given, fields the model drops included, so it is bounded as
    a body is: here by numbers whose canonical JSON is four times their text (1e15 is
    1000000000000000.0), within the HTTP ingress's size limit as sent."""
    bus = await bus_writing(NEWEST, max_payload_bytes=1000)
    pad = ",".join(["1e15"] * 800)
    order = '{"type":"PlaceOrder","body":{"order_id":"o-1","amount_cents":1250,"pad":[PAD]}}'
    raw = order.replace("PAD", pad).encode()
    assert len(raw) < 1000 + http_ingress.ENVELOPE_SLACK_BYTES

    answer = await http_ingress.handle(bus, {"idempotency-key": "k1"}, raw)

    assert answer.status == 413
    assert "over 5,096 bytes as JSON" in answer.body["error"]
    assert (await bus.account.table(bus.config.ingress_table).query()).entities == []
    assert await bus.account.queue("orders").approximate_count() == 0


def test_a_request_digest_tells_apart_what_was_sent() -> None:
    """A bulk row may hold values JSON has no type for (a Parquet timestamp): hashed too."""
    at = datetime(2026, 11, 26, 7, 0, tzinfo=UTC)

    def digest(body: dict[str, object], to: str | None = None, name: str = "T") -> str | None:
        return request_digest(name, to, body, 10_000)

    assert digest({"at": at, "n": 1}) == digest({"n": 1, "at": at})  # keys in any order
    others = {
        digest({"at": at.replace(hour=8), "n": 1}),
        digest({"at": at, "n": 2}),
        digest({"at": at, "n": 1}, to="orders"),
        digest({"at": at, "n": 1}, name="U"),
        digest({"at": at, "n": 1, "extra": None}),
    }
    assert len(others | {digest({"at": at, "n": 1})}) == 6
    # 5,000 characters, over 10,000 bytes: too large to be hashed
    assert request_digest("T", None, {"text": "é" * 5_000}, 10_000) is None


async def test_the_audit_reads_a_record_with_the_request_fingerprint_as_one_without() -> None:
    """The audit (``shared.audit.rows``, every source: the account, Table Storage, exports)
    takes the properties it needs by name: the new one is no column of its rows."""
    written = await bus_writing(NEWEST)
    assert (await post(written, ORDER, "k1")).status == 202
    properties = (await record(written, "k1")).properties
    without = {k: v for k, v in properties.items() if k != REQUEST_FINGERPRINT}

    assert REQUEST_FINGERPRINT in properties
    assert ingress_row("ingress", "k1", properties) == ingress_row("ingress", "k1", without)
