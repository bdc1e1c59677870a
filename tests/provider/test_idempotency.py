"""The local provider's idempotency rules and books, through a real client and server."""

from __future__ import annotations

from tests.provider.client import Client, charge


async def test_the_same_key_and_body_get_the_first_answer_and_apply_once(client: Client) -> None:
    first = await client.call("charge", charge(), "k1")
    again = await client.call("charge", charge(), "k1")
    assert first.status == 200
    assert again == first
    assert first.body["id"].startswith("ch_")
    assert client.keys() == ["k1"]


async def test_another_key_for_the_same_order_is_a_second_charge(client: Client) -> None:
    # The provider deduplicates keys, not orders: a fresh key is a fresh charge
    await client.call("charge", charge(), "k1")
    await client.call("charge", charge(), "k2")
    assert client.keys() == ["k1", "k2"]
    assert client.provider.books.charged("o1") == 2400


async def test_the_same_key_with_another_body_or_operation_is_refused_with_422(
    client: Client,
) -> None:
    await client.call("charge", charge(amount=1200), "k1")
    other_body = await client.call("charge", charge(amount=1300), "k1")
    other_operation = await client.call("refund", {"order": "o1", "amount": 1200}, "k1")
    assert (other_body.status, other_operation.status) == (422, 422)
    assert other_body.body["error"]["code"] == "idempotency_key_reused"
    assert client.keys() == ["k1"]


async def test_a_request_without_a_key_or_with_an_overlong_key_is_refused(client: Client) -> None:
    missing = await client.call("charge", charge(), None)
    overlong = await client.call("charge", charge(), "k" * 256)
    assert (missing.status, overlong.status) == (400, 400)
    assert "Idempotency-Key" in missing.body["error"]["message"]
    assert client.keys() == []


async def test_a_declined_card_is_402_and_the_key_keeps_that_answer(client: Client) -> None:
    declined = await client.call("charge", charge(decline=True), "k1")
    again = await client.call("charge", charge(decline=True), "k1")
    assert declined.status == 402
    assert declined.body["error"]["code"] == "card_declined"
    assert again == declined
    assert client.keys() == []


async def test_a_refund_gives_back_a_charge_once(client: Client) -> None:
    await client.call("charge", charge(amount=1200), "c1")
    refund = {"order": "o1", "amount": 1200}
    first = await client.call("refund", refund, "r1")
    again = await client.call("refund", refund, "r1")
    assert first.status == 200
    assert again == first
    assert first.body["kind"] == "refund"
    assert client.keys() == ["c1", "r1"]
    assert client.provider.books.charged("o1") == 0


async def test_a_refund_of_an_order_never_charged_or_of_too_much_is_refused(
    client: Client,
) -> None:
    never = await client.call("refund", {"order": "o9", "amount": 100}, "r1")
    await client.call("charge", charge(amount=1200), "c1")
    too_much = await client.call("refund", {"order": "o1", "amount": 1201}, "r2")
    await client.call("refund", {"order": "o1", "amount": 1200}, "r3")
    twice = await client.call("refund", {"order": "o1", "amount": 1200}, "r4")
    assert (never.status, too_much.status, twice.status) == (404, 400, 400)
    assert never.body["error"]["code"] == "no_charge"
    assert client.keys() == ["c1", "r3"]


async def test_the_ledger_over_http_is_the_books_with_the_faults_injected(client: Client) -> None:
    await client.call("charge", charge(order="o1", amount=500), "c1")
    await client.call("charge", charge(order="o2", amount=700), "c2")
    await client.call("refund", {"order": "o1", "amount": 500}, "r1")
    ledger = await client.get("/ledger")
    assert ledger.status == 200
    assert ledger.body == client.provider.ledger().model_dump()
    kinds = [(e["kind"], e["key"], e["order"], e["amount"]) for e in ledger.body["entries"]]
    assert kinds == [
        ("charge", "c1", "o1", 500),
        ("charge", "c2", "o2", 700),
        ("refund", "r1", "o1", 500),
    ]
    assert ledger.body["faults"] == {"unavailable": 0, "drop": 0, "late": 0}


async def test_a_missing_or_wrong_credential_is_401_and_applies_nothing(client: Client) -> None:
    missing = await client.call("charge", charge(), "k1", credential=None)
    wrong = await client.call("charge", charge(), "k1", credential="guess")
    ledger = await client.get("/ledger", credential=None)
    assert (missing.status, wrong.status, ledger.status) == (401, 401, 401)
    assert client.keys() == []
    assert (await client.call("charge", charge(), "k1")).status == 200
