"""The rollout of scoped idempotency keys (BUS_INGRESS_KEY_SCOPES, docs/deploy.md): while
Azure Functions replaces instances one at a time, instances of the previous version and of
this one serve the ingress together. With the setting ``off`` (the default) this version
writes and reads its records where and as the previous version does, so a retry answered by
either kind of instance finds the first send's record; a key reused for a different message
is refused once the record has a fingerprint."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from shared import http_ingress, runtime
from shared.bus import Bus
from shared.bus.ingress import INGRESS_ROW, SendReceipt, record_key
from shared.bus.records import OutgoingSignal
from shared.clock import to_datetime
from shared.errors import CorruptRecord, IdempotencyKeyReused, NotFound
from shared.provisioning import provision
from shared.sample.app import PlaceOrder
from shared.stores.table import Entity, Table
from tests.conftest import Backend, unique_name

REAL: dict[str, Any] = {"order_id": "o-real", "customer": "ada", "amount_cents": 125_000}
FORGED: dict[str, Any] = {"order_id": "o-forged", "customer": "mallory", "amount_cents": 1}
PREVIOUS_LAYOUT = {
    "sender",
    "incoming_id",
    "type",
    "created_at",
    "expires_at",
    "outgoing",
    "abandoned",
}
"""The properties the previous version writes on an ingress record (main:shared/bus/ingress.py)."""


# -- The previous version's reader ------------------------------------------------------------
# Copied from the previous version (`git show main:shared/bus/ingress.py`: the read at the top
# of IngressClient._send_once, `_expires` and `_outgoing`), unchanged but for the names. It
# reads only `expires_at` and `outgoing` of the record under the raw key, so extra
# properties (the fingerprint) are ignored by it.


def previous_expires(entity: Entity) -> datetime:
    value = entity["expires_at"]
    if not isinstance(value, datetime):
        raise CorruptRecord(
            f"ingress row {entity.partition_key!r}/{entity.row_key!r}: expires_at {value!r}"
        )
    return value


def previous_outgoing(entity: Entity) -> tuple[OutgoingSignal, ...]:
    return tuple(OutgoingSignal.model_validate(o) for o in json.loads(str(entity["outgoing"])))


async def previous_version_answer(bus: Bus, key: str) -> SendReceipt | None:
    """What an instance of the previous version answers a retry with ``key``: the committed
    record's receipt, or None (it would send the message anew)."""
    table: Table = bus.account.table(bus.config.ingress_table)
    now = to_datetime(bus.config.clock())
    try:
        existing: Entity | None = await table.get(key, INGRESS_ROW)
    except NotFound:
        existing = None
    if existing is not None and previous_expires(existing) > now:
        outgoing = previous_outgoing(existing)
        return SendReceipt(key, tuple(o.message_id for o in outgoing), True)
    return None


# -- fixtures -----------------------------------------------------------------------------------


async def make_bus(backend: Backend, monkeypatch: pytest.MonkeyPatch, key_scopes: str) -> Bus:
    monkeypatch.setenv("BUS_INGRESS_KEY_SCOPES", key_scopes)
    worker = runtime.Worker.for_account(backend.account)
    assert worker.config.ingress_key_scopes is (key_scopes == "on")
    await provision(backend.account, worker.resources)
    bus = worker.bus()
    await bus.subscribe_all()
    await bus.account.queue("orders").clear()  # the session's Azurite: earlier tests' signals
    return bus


@pytest.fixture
async def bus(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Bus:
    """An instance of this version with the setting unset: ``off``."""
    monkeypatch.delenv("BUS_INGRESS_KEY_SCOPES", raising=False)
    return await make_bus(backend, monkeypatch, "")


def order(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "PlaceOrder", "to": "orders", "body": body}


async def post(bus: Bus, body: dict[str, Any], key: str) -> http_ingress.Answer:
    payload = json.dumps(order(body)).encode()
    return await http_ingress.handle(bus, {"Idempotency-Key": key}, payload)


async def cli_send(bus: Bus, body: dict[str, Any], key: str) -> SendReceipt:
    return await bus.client("cli").send(PlaceOrder(**body), to="orders", idempotency_key=key)


async def queued_ids(bus: Bus) -> list[str]:
    signals = await bus.account.queue("orders").peek(32)
    return [json.loads(m.content)["message_id"] for m in signals]


async def record(bus: Bus, partition: str) -> Entity:
    return await bus.account.table(bus.config.ingress_table).get(partition, INGRESS_ROW)


async def previous_version_record(bus: Bus, body: dict[str, Any], key: str) -> SendReceipt:
    """What the previous version leaves for an HTTP send: this version's record without the
    fingerprint the previous version did not write."""
    receipt = await bus.client("http").send(PlaceOrder(**body), to="orders", idempotency_key=key)
    table = bus.account.table(bus.config.ingress_table)
    written = await table.get(key, INGRESS_ROW)
    old = {k: v for k, v in written.properties.items() if k in PREVIOUS_LAYOUT}
    await table.update(Entity(key, INGRESS_ROW, old), etag=written.etag)
    return receipt


# -- off: the previous version's place and layout -----------------------------------------------


async def test_off_is_the_default_and_writes_the_previous_layout_plus_a_fingerprint(
    bus: Bus,
) -> None:
    assert bus.config.ingress_key_scopes is False
    key = unique_name("order")
    first = await post(bus, REAL, key)
    assert first.status == 202

    written = await record(bus, key)  # the raw key, where the previous version reads
    # Plus its format version and the request's fingerprint, which the previous version
    # ignores as it does the fingerprint
    assert set(written.properties) == PREVIOUS_LAYOUT | {
        "fingerprint",
        "format",
        "request_fingerprint",
    }
    with pytest.raises(NotFound):
        await record(bus, record_key("http", key))


async def test_a_new_instances_record_answers_the_old_instances_retry(bus: Bus) -> None:
    """The rollout: the first request reaches an instance of this version, which commits;
    the retry reaches one of the previous version, which must find the record, not send the
    order again with fresh message ids."""
    key = unique_name("order")
    first = await post(bus, REAL, key)
    assert first.status == 202

    old = await previous_version_answer(bus, key)

    assert old == SendReceipt(key, tuple(first.body["message_ids"]), True)
    assert await queued_ids(bus) == first.body["message_ids"]


async def test_an_old_instances_record_answers_the_new_instances_retry(bus: Bus) -> None:
    key = unique_name("order")
    old = await previous_version_record(bus, REAL, key)

    again = await post(bus, REAL, key)
    from_cli = await cli_send(bus, REAL, key)

    assert (again.status, again.body["message_ids"]) == (200, list(old.message_ids))
    assert from_cli == SendReceipt(key, old.message_ids, True)
    assert set(await queued_ids(bus)) == set(old.message_ids)  # its signal sent again


async def test_a_record_without_a_fingerprint_is_answered_as_before(bus: Bus) -> None:
    """What stays exposed while off (docs/deploy.md): the previous version's record says
    nothing of its message, so any send under its key is answered with its receipt."""
    key = unique_name("order")
    old = await previous_version_record(bus, FORGED, key)

    assert await cli_send(bus, REAL, key) == SendReceipt(key, old.message_ids, True)


async def test_off_refuses_another_senders_different_message_under_a_taken_key(
    bus: Bus,
) -> None:
    """Issue 34's attack while off: the keys are one namespace, but the HTTP caller's record
    has a fingerprint, so the CLI's different message is refused, not answered with the
    caller's receipt (exit 2 for `bus send`: nothing was sent and the caller is told)."""
    key = unique_name("reprice-2026-11:17")
    forged = await post(bus, FORGED, key)
    assert forged.status == 202

    with pytest.raises(IdempotencyKeyReused, match="already used for a different message"):
        await cli_send(bus, REAL, key)

    assert await queued_ids(bus) == forged.body["message_ids"]


# -- the switch to on ---------------------------------------------------------------------------


async def test_records_written_while_off_answer_after_the_switch(
    bus: Bus, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = unique_name("order")
    first = await post(bus, REAL, key)
    switched = await make_bus(backend, monkeypatch, "on")

    again = await post(switched, REAL, key)
    refused = await post(switched, FORGED, key)

    assert (again.status, again.body["message_ids"]) == (200, first.body["message_ids"])
    assert refused.status == 409


async def test_an_off_instance_finds_the_record_of_one_already_switched_on(
    bus: Bus, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changing the setting restarts the instances: for a moment some are on, some off."""
    switched = await make_bus(backend, monkeypatch, "on")
    key = unique_name("order")
    first = await post(switched, REAL, key)
    assert first.status == 202

    again = await post(bus, REAL, key)
    refused = await post(bus, FORGED, key)

    assert (again.status, again.body["message_ids"]) == (200, first.body["message_ids"])
    assert refused.status == 409
    assert set(await queued_ids(bus)) == set(first.body["message_ids"])


async def test_off_a_raw_key_spelled_like_a_scoped_record_answers_no_one_else(bus: Bus) -> None:
    """An HTTP caller used the key ``cli|K`` while off: that raw-key record is not the CLI's
    record of K, so the CLI's send of K is its own, not refused nor answered with it."""
    key = unique_name("k")
    taken = await post(bus, FORGED, f"cli|{key}")
    assert taken.status == 202

    real = await cli_send(bus, FORGED, key)

    assert real.deduplicated is False
    assert real.message_ids != tuple(taken.body["message_ids"])
