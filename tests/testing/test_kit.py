"""The test kit as a user uses it: tests of the bakery (``tests.testing.bakery``), a small app
of a user's own, through the ``bus_kit`` fixture of the kit's pytest plugin."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.bus import BusApp, Outcome
from shared.bus.effects import EffectRequest
from shared.testing import BusKit, KitError
from tests.testing import bakery
from tests.testing.bakery import (
    CancelIfUnpaid,
    Deliver,
    Order,
    OrderPaid,
    Oven,
    PlaceOrder,
    Round,
)


@pytest.fixture
def bus_app() -> BusApp:
    return bakery.app


async def test_an_order_runs_through_every_endpoint_until_quiet(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    assert await bus_kit.state("orders", "o1", Order) == Order(status="paid", cakes=2)
    assert await bus_kit.state("kitchen", "o1", Oven) == Oven(baked=2)
    assert await bus_kit.state("couriers", "o1", Round) == Round(delivered=["o1"])
    assert await bus_kit.state("couriers", "o2", Round) == Round()


async def test_the_messages_sent_are_read_by_type_and_by_destination(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    assert await bus_kit.sent(OrderPaid) == [OrderPaid(order="o1", cakes=2)]
    assert await bus_kit.sent(Deliver, to="couriers") == [Deliver(order="o1", cakes=2)]
    assert await bus_kit.sent(Deliver, to="kitchen") == []
    to_orders = await bus_kit.messages(to="orders")
    # The delayed timeout (not due yet) and the payment's answer; never the test's own send.
    assert sorted(m.type_name for m in to_orders) == ["CancelIfUnpaid", "Charged"]
    assert [m.source for m in await bus_kit.messages(of=OrderPaid)] == ["orders"]


async def test_effects_are_requested_once_and_applied_once(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    [charge] = await bus_kit.effects("payments")
    assert isinstance(charge, EffectRequest)
    assert (charge.operation, charge.body) == ("charge", {"cents": 600})
    assert bus_kit.provider("payments").applied(charge.key) == 1
    assert await bus_kit.effects("refunds") == []


async def test_a_declined_charge_is_answered_as_failed(bus_kit: BusKit) -> None:
    bus_kit.provider("payments").declines = 1
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    assert (await bus_kit.state("orders", "o1", Order)).status == "declined"
    assert await bus_kit.sent(OrderPaid) == []
    assert bus_kit.provider("payments").ledger == []


async def test_a_lost_answer_is_retried_later_with_the_same_key(bus_kit: BusKit) -> None:
    payments = bus_kit.provider("payments")
    payments.lost_answers = 1
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    assert (await bus_kit.state("orders", "o1", Order)).status == "placed"
    await bus_kit.advance(60)  # the performer's first delayed retry is due after about 10 s
    assert (await bus_kit.state("orders", "o1", Order)).status == "paid"
    [charge] = await bus_kit.effects()
    assert payments.calls == 2
    assert payments.applied(charge.key) == 1


async def test_the_clock_fires_a_timeout(bus_kit: BusKit) -> None:
    bus_kit.provider("payments").unavailable = 1000  # never answers while the test runs
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    await bus_kit.advance(bakery.PAYMENT_TIMEOUT.total_seconds() - 1)
    assert (await bus_kit.state("orders", "o1", Order)).status == "placed"
    await bus_kit.advance(1)
    assert (await bus_kit.state("orders", "o1", Order)).status == "cancelled"


async def test_a_delayed_send_waits_for_the_clock(bus_kit: BusKit) -> None:
    await bus_kit.send(CancelIfUnpaid(order="o1"), to="orders", delay=timedelta(seconds=30))
    await bus_kit.run_until_quiet()
    assert await bus_kit.audit("orders") == []
    await bus_kit.advance(30)
    [entry] = await bus_kit.audit("orders")
    assert (entry.message_type, entry.source) == ("CancelIfUnpaid", "kit")


async def test_a_failing_message_is_parked_with_its_reason(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="big", cakes=500), to="orders")
    await bus_kit.run_until_quiet()
    [parked] = await bus_kit.parked("orders")
    assert parked.message_type == "PlaceOrder"
    assert "we cannot bake 500 cakes" in parked.reason
    assert parked.dequeue_count == 5
    assert await bus_kit.state("orders", "big", Order) == Order()
    assert await bus_kit.parked("kitchen") == []


async def test_audit_rows_say_what_each_message_caused(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.run_until_quiet()
    rows = {str(row.message_type): row for row in await bus_kit.audit("orders")}
    assert sorted(rows) == ["Charged", "PlaceOrder"]
    caused = rows["PlaceOrder"].caused or ()
    assert sorted((c.type, c.destination) for c in caused) == [
        ("CancelIfUnpaid", "orders"),
        ("EffectRequest", "effects"),
    ]
    assert [(c.type, c.destination) for c in rows["Charged"].caused or ()] == [
        ("OrderPaid", "kitchen")
    ]


async def test_a_duplicate_is_applied_once(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.duplicate("orders")
    await bus_kit.run_until_quiet()
    assert await bus_kit.state("kitchen", "o1", Oven) == Oven(baked=2)
    assert len(await bus_kit.effects()) == 1
    # The copy finds the token claimed by the committed O(m) (it waits for the cleanup's R7):
    # it resumes, signalling again, and each endpoint downstream resumes the same way.
    assert bus_kit.outcomes[Outcome.RESUMED] >= 1
    assert bus_kit.outcomes[Outcome.PROCESSED] == 5


async def test_concurrent_copies_are_applied_once(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    await bus_kit.deliver_concurrently("orders", copies=3)
    # Interleaved: every copy made its first storage operation before any made a second.
    first = bus_kit.instrumentation.operations[:3]
    assert len({(op.kind, op.target) for op in first}) == 1
    await bus_kit.run_until_quiet()
    assert await bus_kit.state("couriers", "o1", Round) == Round(delivered=["o1"])
    assert len(await bus_kit.effects()) == 1
    # Five messages (the timeout is not due yet), each processed once whatever its copies did.
    assert bus_kit.outcomes[Outcome.PROCESSED] == 5


async def test_a_crash_after_the_commit_recovers_and_applies_once(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    crashed = await bus_kit.crash("orders", at="table.transact", when="after")
    assert crashed.kind == "table.transact"
    assert bus_kit.crashes == 1
    await bus_kit.run_until_quiet()
    assert await bus_kit.state("kitchen", "o1", Oven) == Oven(baked=2)
    assert len(await bus_kit.effects()) == 1


async def test_asking_for_what_is_not_there_is_a_clear_error(bus_kit: BusKit) -> None:
    with pytest.raises(KitError, match="no message is waiting at endpoint orders"):
        await bus_kit.deliver("orders")
    with pytest.raises(KitError, match="declares no service 'refunds'"):
        bus_kit.provider("refunds")
    await bus_kit.send(PlaceOrder(order="o1", cakes=2), to="orders")
    with pytest.raises(KitError, match=r"made no operation 'blob\.teleport'"):
        await bus_kit.crash("orders", at="blob.teleport")
    with pytest.raises(KitError, match="at least 2, not 1"):
        await bus_kit.duplicate("orders", copies=1)


def test_the_users_app_object_is_left_as_declared(bus_kit: BusKit) -> None:
    assert sorted(bakery.app.endpoints) == ["couriers", "kitchen", "orders"]
    assert sorted(bus_kit.app.endpoints) == ["couriers", "effects", "kitchen", "orders"]
