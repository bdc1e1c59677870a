"""Idempotency keys are scoped by sender, and a key names one message: the attacks of issue
34 (an HTTP caller taking a key another sender will use) against the ingress, on memory and
on Azurite, plus the records the previous version left under raw keys."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from shared import http_ingress
from shared.bus import Bus
from shared.bus.ingress import INGRESS_ROW, SendReceipt, record_key
from shared.errors import IdempotencyKeyReused, InvalidName
from shared.sample.app import PlaceOrder
from shared.stores.table import Entity
from tests.bus.test_ingress_rollout import make_bus
from tests.conftest import Backend, unique_name

REAL: dict[str, Any] = {"order_id": "o-real", "customer": "ada", "amount_cents": 125_000}
FORGED: dict[str, Any] = {"order_id": "o-forged", "customer": "mallory", "amount_cents": 1}


@pytest.fixture
def key_scopes() -> str:
    """BUS_INGRESS_KEY_SCOPES: these attacks are about scoped keys, so ``on`` unless a test
    runs in both modes (it parametrizes this)."""
    return "on"


@pytest.fixture
async def bus(backend: Backend, key_scopes: str, monkeypatch: pytest.MonkeyPatch) -> Bus:
    return await make_bus(backend, monkeypatch, key_scopes)


def order(body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "PlaceOrder", "to": "orders", "body": body, **extra}


async def post(bus: Bus, payload: object, key: str) -> http_ingress.Answer:
    return await http_ingress.handle(bus, {"Idempotency-Key": key}, json.dumps(payload).encode())


async def cli_send(bus: Bus, body: dict[str, Any], key: str) -> SendReceipt:
    return await bus.client("cli").send(PlaceOrder(**body), to="orders", idempotency_key=key)


async def queued_ids(bus: Bus) -> list[str]:
    signals = await bus.account.queue("orders").peek(32)
    return [json.loads(m.content)["message_id"] for m in signals]


async def test_an_http_caller_cannot_take_a_key_the_cli_will_use(bus: Bus) -> None:
    """The finding: a POST with a predictable key made the later `bus send` answer
    deduplicated with the attacker's message id, and the real order was dropped."""
    key = unique_name("reprice-2026-11:17")
    forged = await post(bus, order(FORGED), key)
    assert forged.status == 202
    [forged_id] = forged.body["message_ids"]

    real = await cli_send(bus, REAL, key)

    assert real.deduplicated is False
    [real_id] = real.message_ids
    assert real_id != forged_id
    assert sorted(await queued_ids(bus)) == sorted([forged_id, real_id])
    # Each sender's retry still gets its own receipt.
    assert (await cli_send(bus, REAL, key)).message_ids == (real_id,)
    again = await post(bus, order(FORGED), key)
    assert (again.status, again.body["message_ids"]) == (200, [forged_id])


async def test_a_key_holding_the_separator_reaches_no_other_senders_record(bus: Bus) -> None:
    """An HTTP key spelled like the CLI's record (``cli|K``), or like a bulk job's, sends
    its own message and leaves the other sender's answer alone."""
    key = unique_name("k")
    real = await cli_send(bus, REAL, key)
    for spelled in (record_key("cli", key), f"|{key}", f"bulk:job|{key}", f"http|{key}"):
        answer = await post(bus, order(FORGED), spelled)
        assert answer.status == 202, answer.body
        assert answer.body["message_ids"] != list(real.message_ids)
    assert (await cli_send(bus, REAL, key)).message_ids == real.message_ids


def test_record_keys_are_one_per_scope_and_key() -> None:
    pairs = [("http", "a|b"), ("http", "a"), ("cli", "http|a"), ("http:x", "y"), ("http", "x|y")]
    assert len({record_key(scope, key) for scope, key in pairs}) == len(pairs)
    for scope in ("http|a", "", "a/b", "x" * 101):
        with pytest.raises(InvalidName):
            record_key(scope, "k")


@pytest.mark.parametrize(
    "changed",
    [
        order({**REAL, "amount_cents": 1}),
        order(REAL, delay_seconds=60),
        {"type": "FireAt", "body": {"game_id": "g", "position": 3}},
    ],
    ids=["body", "due-time", "type"],
)
@pytest.mark.parametrize("key_scopes", ["on", "off"])
async def test_a_key_reused_for_another_message_is_a_409_naming_the_key(
    bus: Bus, changed: dict[str, Any]
) -> None:
    key = unique_name("order")
    first = await post(bus, order(REAL), key)
    assert first.status == 202

    refused = await post(bus, changed, key)

    assert refused.status == 409
    assert key in refused.body["error"]
    assert "o-real" not in refused.body["error"]  # nothing of the other message
    assert first.body["message_ids"][0] not in refused.body["error"]
    assert await queued_ids(bus) == first.body["message_ids"]
    repeat = await post(bus, order(REAL), key)
    assert (repeat.status, repeat.body["message_ids"]) == (200, first.body["message_ids"])


async def test_a_delayed_send_retried_later_is_the_same_message(bus: Bus, backend: Backend) -> None:
    """The delay as asked is compared, not the due time it gave: a retry comes later."""
    key = unique_name("later")
    first = await post(bus, order(REAL, delay_seconds=600), key)
    await backend.elapse(1)
    again = await post(bus, order(REAL, delay_seconds=600), key)
    assert (again.status, again.body["message_ids"]) == (200, first.body["message_ids"])


async def test_one_due_time_in_another_offset_is_the_same_message(bus: Bus) -> None:
    key = unique_name("at")
    first = await post(bus, order(REAL, deliver_at="2030-01-01T09:00:00+00:00"), key)
    again = await post(bus, order(REAL, deliver_at="2030-01-01T10:00:00+01:00"), key)
    later = await post(bus, order(REAL, deliver_at="2030-01-01T10:00:00+00:00"), key)
    assert (first.status, again.status, later.status) == (202, 200, 409)


@pytest.mark.parametrize("key_scopes", ["on", "off"])
async def test_the_library_client_raises_on_a_reused_key(bus: Bus) -> None:
    key = unique_name("lib")
    await cli_send(bus, REAL, key)
    with pytest.raises(IdempotencyKeyReused, match=key):
        await cli_send(bus, FORGED, key)
    with pytest.raises(IdempotencyKeyReused):
        await bus.client("cli").send(
            PlaceOrder(**REAL), to="orders", idempotency_key=key, delay=timedelta(minutes=5)
        )


# -- records of the previous version (raw key, no scope, no fingerprint) ----------------------


async def legacy_record(bus: Bus, sender: str, body: dict[str, Any], key: str) -> SendReceipt:
    """What the previous version left: the record of a real send, under the raw key and
    without the scope, key and fingerprint it did not write."""
    receipt = await bus.client(sender).send(PlaceOrder(**body), to="orders", idempotency_key=key)
    table = bus.account.table(bus.config.ingress_table)
    scoped = await table.get(record_key(sender, key), INGRESS_ROW)
    old = {k: v for k, v in scoped.properties.items() if k not in {"scope", "key", "fingerprint"}}
    await table.insert(Entity(key, INGRESS_ROW, old))
    await table.delete(scoped.partition_key, INGRESS_ROW)
    return receipt


async def test_a_legacy_record_is_honoured_for_the_sender_kind_that_wrote_it(bus: Bus) -> None:
    key = unique_name("old")
    old = await legacy_record(bus, "cli", REAL, key)

    again = await cli_send(bus, REAL, key)

    assert again == SendReceipt(key, old.message_ids, True)


async def test_a_legacy_record_of_another_sender_kind_is_refused_not_answered(bus: Bus) -> None:
    """The previous version's record says which kind of sender wrote it: an HTTP caller's
    record made before the upgrade answers no `bus send`, and is not silently overridden
    either (that would send a second copy of a message a retry may be about)."""
    key = unique_name("reprice-2026-11:17")
    forged = await legacy_record(bus, "http", FORGED, key)

    with pytest.raises(IdempotencyKeyReused, match="already used for a different message"):
        await cli_send(bus, REAL, key)

    assert await queued_ids(bus) == list(forged.message_ids)
    again = await post(bus, order(FORGED), key)  # its writer still gets its receipt
    assert (again.status, again.body["message_ids"]) == (200, list(forged.message_ids))


async def test_a_legacy_record_for_another_type_is_a_409(bus: Bus) -> None:
    key = unique_name("old")
    await legacy_record(bus, "http", REAL, key)
    answer = await post(bus, {"type": "FireAt", "body": {"game_id": "g", "position": 3}}, key)
    assert answer.status == 409


async def test_a_legacy_raw_key_spelled_like_a_scoped_record_answers_no_one_else(
    bus: Bus,
) -> None:
    """Before the upgrade an HTTP caller used the key ``cli|K``: the CLI's record of K is
    stored there now, and finding that old record is a refusal, not the CLI's receipt."""
    key = unique_name("k")
    await legacy_record(bus, "http", FORGED, f"cli|{key}")
    with pytest.raises(IdempotencyKeyReused):
        await cli_send(bus, REAL, key)


async def test_a_legacy_record_past_its_window_is_ignored(bus: Bus, backend: Backend) -> None:
    key = unique_name("old")
    old = await legacy_record(bus, "http", FORGED, key)
    table = bus.account.table(bus.config.ingress_table)
    record = await table.get(key, INGRESS_ROW)
    expired = {**record.properties, "expires_at": record["created_at"]}
    await table.update(Entity(key, INGRESS_ROW, expired), etag=record.etag)

    fresh = await cli_send(bus, REAL, key)

    assert fresh.deduplicated is False
    assert fresh.message_ids != old.message_ids
