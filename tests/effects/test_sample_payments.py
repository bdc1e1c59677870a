"""The sample's payments through the declared provider: each order charged once and shipped,
a declined card neither charged nor shipped, a duplicate ChargePayment charging nothing more,
and a late payment refunded once; the provider is kept in memory and its ledger is the
evidence."""

from __future__ import annotations

from shared.sample.app import (
    ChargePayment,
    Payment,
    PaymentReceived,
    PlaceOrder,
    Shipping,
)
from tests.bus.harness import Harness
from tests.effects.sample import DecliningProvider, sample_harness


async def place(harness: Harness, order: str, amount: int = 1200, **later: int) -> None:
    command = PlaceOrder(order_id=order, customer="ada", amount_cents=amount, **later)
    await harness.setup_bus.client().send(command, to="orders", idempotency_key=f"place-{order}")
    await harness.run_until_quiet()


def charges(provider: DecliningProvider, order: str) -> list[str]:
    return [e.key for e in provider.ledger if e.operation == "charge" and e.body["order"] == order]


async def test_an_order_is_charged_once_through_the_provider_and_shipped() -> None:
    provider = DecliningProvider(lost_answers=1, unavailable=1)  # two unknown outcomes first
    harness = await sample_harness(provider)

    await place(harness, "o1", 1200)

    payment = await harness.applied_state("payments", "o1", Payment)
    assert charges(provider, "o1") == [payment.charge_key]
    assert (payment.status, payment.amount_cents) == ("charged", 1200)
    assert (await harness.applied_state("shipping", "o1", Shipping)).shipment_id
    [entry] = provider.ledger
    assert entry.body == {"order": "o1", "amount": 1200, "currency": "eur"}
    first_answer = await provider.call("charge", entry.body, entry.key)  # replayed, not applied
    assert payment.payment_id == first_answer.body["id"]
    assert await harness.tokens_in_flight() == []


async def test_a_declined_card_is_recorded_and_the_order_is_not_shipped() -> None:
    provider = DecliningProvider(declined={"o2"})
    harness = await sample_harness(provider)

    await place(harness, "o2")

    payment = await harness.applied_state("payments", "o2", Payment)
    assert (payment.status, payment.amount_cents, payment.declined) == ("declined", 0, "declined")
    checkout = await harness.saga_instance("orders", "o2")  # declined: the checkout is over
    assert checkout is not None
    assert checkout.completed
    assert (await harness.applied_state("shipping", "o2", Shipping)).shipment_id is None
    assert provider.ledger == []
    assert provider.calls == 1


async def test_a_second_charge_payment_for_an_order_charges_nothing_more() -> None:
    provider = DecliningProvider()
    harness = await sample_harness(provider)
    await place(harness, "o3", 900)

    # The same command sent again by someone else, under another key: a new message
    again = ChargePayment(order_id="o3", amount_cents=900)
    await harness.setup_bus.client().send(again, to="payments", idempotency_key="again-o3")
    await harness.run_until_quiet()

    payment = await harness.applied_state("payments", "o3", Payment)
    assert len(charges(provider, "o3")) == 1
    assert (payment.status, payment.amount_cents) == ("charged", 900)
    assert provider.calls == 1


async def test_a_late_payment_reported_twice_is_refunded_once_and_not_shipped() -> None:
    provider = DecliningProvider()
    harness = await sample_harness(provider)
    await place(harness, "late1", 700, pay_within_seconds=60)  # the window passes meanwhile
    checkout = await harness.saga_instance("orders", "late1")  # cancelled: the checkout is over
    assert checkout is not None
    assert checkout.completed

    for key in ("report-1", "report-1-again"):
        paid = PaymentReceived(order_id="late1", payment_id="pay-1", amount_cents=700)
        await harness.setup_bus.client().send(paid, to="orders", idempotency_key=key)
    await harness.run_until_quiet()

    payment = await harness.applied_state("payments", "late1", Payment)
    [refund_key] = payment.refunds
    refunds = [e for e in provider.ledger if e.operation == "refund"]
    assert [(e.key, e.body) for e in refunds] == [(refund_key, {"order": "late1", "amount": 700})]
    assert (payment.status, payment.refunded_cents) == ("refunded", 700)
    assert payment.refunds[refund_key].outcome == "succeeded"
    assert charges(provider, "late1") == []
    assert (await harness.applied_state("shipping", "late1", Shipping)).shipment_id is None
