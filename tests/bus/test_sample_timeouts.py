"""The sample's payment timeout: the checkout (a saga instance of ``orders``) of an order not
paid within its window is ended by the timeout it requested, and a payment arriving after that
finds no checkout and is refunded; an order paid in time cancels its timeout, which then never
fires; each exactly once, under duplicate deliveries, a provider reporting a payment twice and
a crash right after the timeout was signalled. In-memory stores and a private Azurite (the sample's
queues have fixed names). A test lets time pass in short steps until the timeout has been
processed, failing if that happens before the window closed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus import Outcome
from shared.effects.memory import InMemoryProvider
from shared.sample.app import Order, Payment, PaymentReceived, PlaceOrder, Shipping
from shared.stores.instrumented import Fault, FaultPlan, Operation
from tests.bus.harness import Harness
from tests.bus.waiting import wait_until
from tests.conftest import Backend, started_azurite
from tests.effects.sample import sample_with


@pytest.fixture(scope="module")
def azurite() -> Iterator[AzuriteEndpoints]:
    """An emulator of this module's own (the sample app's queue names are fixed), which the
    shared ``backend`` fixture uses in place of the session's."""
    yield from started_azurite()


def window(backend: Backend) -> int:
    """The payment window: minutes in the sample's spirit, two real seconds on Azurite
    (whole seconds, as the queue hides messages)."""
    return 300 if backend.clock is not None else 2


async def deliver_visible(harness: Harness) -> Counter[Outcome]:
    """Deliver what every queue shows now (and what that shows now), without waiting."""
    before = Counter(harness.outcomes)
    busy = True
    while busy:
        busy = False
        for name in harness.app.endpoints:
            for message in await harness.raw.queue(name).receive(32, visibility_timeout=30):
                busy = True
                await harness.deliver(name, message)
    return harness.outcomes - before


async def deliver_after_window(
    harness: Harness, placed_at: float, happened: Callable[[], Awaitable[bool]]
) -> Counter[Outcome]:
    """Deliver what becomes visible as time passes until ``happened()`` and every queue is
    empty (hidden signals included); ``happened()`` must not hold before the payment window
    of an order placed at ``placed_at`` has closed. Returns the outcomes of these deliveries."""
    closes = placed_at + window(harness.backend)
    outcomes: Counter[Outcome] = Counter()

    async def settled() -> bool:
        outcomes.update(await deliver_visible(harness))
        if not await happened():
            return False
        assert harness.config.clock() >= closes, "the timeout came before the window closed"
        endpoints = harness.app.endpoints
        depths = [await harness.raw.queue(name).approximate_count() for name in endpoints]
        return not any(depths)

    await wait_until(harness, settled, within=window(harness.backend) + 10)
    return outcomes


def checkout_over(harness: Harness, order: str) -> Callable[[], Awaitable[bool]]:
    """Whether the order's checkout (its saga instance) has completed."""

    async def over() -> bool:
        instance = await harness.saga_instance("orders", order)
        return instance is not None and instance.completed

    return over


async def deadline_outcomes(harness: Harness, order: str) -> Counter[str]:
    """How the order's PaymentDue timeouts ended, by their audit rows: processed, or
    cancelled (one row each, whichever won). The sample's tables have fixed names, which
    other tests' orders share."""
    return Counter(
        [
            str(row.get("outcome", "processed"))
            async for row in harness.rows("orders").audit_entities()
            if row["message_type"] == "PaymentDue" and row.partition_key == order
        ]
    )


async def placed(backend: Backend, order: str) -> tuple[Harness, float]:
    """A harness with ``order`` placed, and when it was (on the bus's clock)."""
    harness = await Harness.create(backend, sample_with(InMemoryProvider()))
    for name in harness.app.endpoints:  # fixed-name queues: an earlier test may have left some
        await harness.raw.queue(name).clear()
    placed_at = harness.config.clock()
    await harness.setup_bus.client().send(
        PlaceOrder(
            order_id=order, customer="ada", amount_cents=700, pay_within_seconds=window(backend)
        ),
        to="orders",
        idempotency_key=f"place-{order}",
    )
    await deliver_visible(harness)
    return harness, placed_at


async def pay(harness: Harness, order: str, key: str, copies: int = 1) -> None:
    payment = PaymentReceived(order_id=order, payment_id="pay-1", amount_cents=700)
    await harness.setup_bus.client().send(payment, to="orders", idempotency_key=key)
    for message in await harness.raw.queue("orders").peek(32):
        for _ in range(copies - 1):
            await harness.raw.queue("orders").send(message.content)


async def order_state(harness: Harness, endpoint: str, order: str) -> Order:
    return await harness.applied_state(endpoint, order, Order)


async def payment_state(harness: Harness, order: str) -> Payment:
    return await harness.applied_state("payments", order, Payment)


async def test_an_order_not_paid_in_time_is_cancelled_and_a_late_payment_refunded_once(
    backend: Backend,
) -> None:
    # Given an order waiting for its payment
    harness, placed_at = await placed(backend, "late1")
    assert (await order_state(harness, "orders", "late1")).status == "awaiting_payment"

    # When its window closes without a payment
    assert await deliver_visible(harness) == Counter()  # the timeout is not due yet

    # Then its checkout ends (the order is cancelled), once the window has closed
    await deliver_after_window(harness, placed_at, checkout_over(harness, "late1"))
    assert await deadline_outcomes(harness, "late1") == Counter(processed=1)

    # And a payment arriving afterwards, reported twice under two keys and delivered twice
    # each, is refunded once and the order is not shipped
    await pay(harness, "late1", "provider-1", copies=2)
    await pay(harness, "late1", "provider-1-retry", copies=2)
    await deliver_visible(harness)
    refunded = await payment_state(harness, "late1")
    assert (refunded.status, refunded.refunded_cents) == ("refunded", 700)
    assert await checkout_over(harness, "late1")()
    shipping = await harness.applied_state("shipping", "late1", Shipping)
    assert shipping.shipment_id is None
    assert await harness.tokens_in_flight() == []


async def test_an_order_paid_in_time_ships_and_its_timeout_never_fires(
    backend: Backend,
) -> None:
    # Given an order paid within its window (the payment delivered twice)
    harness, placed_at = await placed(backend, "ontime1")
    await pay(harness, "ontime1", "provider-2", copies=2)

    # When the payment, its shipping and the cancel of the timeout are processed
    await deliver_visible(harness)

    # Then the order shipped and its checkout completed, the timeout cancelled before it fired
    assert await checkout_over(harness, "ontime1")()
    assert (await harness.applied_state("shipping", "ontime1", Shipping)).shipment_id
    assert await deadline_outcomes(harness, "ontime1") == Counter(cancelled=1)

    # And once the window has passed, nothing more happens: no timeout, no refund
    await harness.backend.elapse(window(harness.backend) + 1)
    later = await deliver_visible(harness)
    assert later[Outcome.PROCESSED] == 0, later
    assert harness.config.clock() >= placed_at + window(harness.backend)
    assert await deadline_outcomes(harness, "ontime1") == Counter(cancelled=1)
    assert (await payment_state(harness, "ontime1")).refunded_cents == 0
    assert await harness.tokens_in_flight() == []


def crash_after_the_timeout_is_signalled() -> FaultPlan:
    """Crash right after ``orders`` sends its delayed message to itself (R6 done, R7 not)."""
    hit: list[int] = []

    def plan(operation: Operation) -> Fault | None:
        if operation.kind == "queue.send" and operation.target == "orders" and not hit:
            hit.append(operation.index)
            return Fault.CRASH_AFTER
        return None

    return plan


async def test_a_crash_after_the_timeout_was_signalled_cancels_once(backend: Backend) -> None:
    # Given the invocation that placed the order crashed after signalling its timeout
    harness = await Harness.create(backend, sample_with(InMemoryProvider()))
    for name in harness.app.endpoints:
        await harness.raw.queue(name).clear()
    harness.instrumentation.plan = crash_after_the_timeout_is_signalled()
    placed_at = harness.config.clock()
    await harness.setup_bus.client().send(
        PlaceOrder(
            order_id="crash1", customer="bob", amount_cents=700, pay_within_seconds=window(backend)
        ),
        to="orders",
        idempotency_key="place-crash1",
    )
    await deliver_visible(harness)
    harness.instrumentation.plan = lambda op: None
    assert harness.crashes == 1

    # When the window closes (the redelivery signalled the timeout once more) and then a
    # payment arrives
    await deliver_after_window(harness, placed_at, checkout_over(harness, "crash1"))
    await pay(harness, "crash1", "provider-3")
    await deliver_visible(harness)

    # Then the order was cancelled once and the payment refunded once
    assert await checkout_over(harness, "crash1")()
    assert await deadline_outcomes(harness, "crash1") == Counter(processed=1)
    assert (await payment_state(harness, "crash1")).refunded_cents == 700
    audited = await harness.audit_ids("orders")
    assert len(audited) == len(set(audited))
    assert await harness.tokens_in_flight() == []
