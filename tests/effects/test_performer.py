"""Effects through the real receive pipeline over the in-memory stores: a handler requests a
charge, the performer calls the provider after the commit, and the answer comes back as a
message processed once."""

from __future__ import annotations

import random

from pydantic import BaseModel

from shared.bus import BusApp, HandlerContext, RetryPolicy
from shared.bus.effects import PERFORMER_ENDPOINT, EffectAnswered, EffectRequest
from shared.bus.messages import Command
from shared.clock import ManualClock
from shared.effects.memory import InMemoryProvider
from shared.effects.performer import add_performer
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend


class PlaceOrder(Command):
    partition_by = "order"
    order: str
    amount: int


class ChargeAnswered(EffectAnswered):
    pass


class Order(BaseModel):
    requested: list[str] = []
    answers: list[tuple[str, str]] = []
    """(key, outcome) of each answer processed, in order."""


def orders_app(provider: InMemoryProvider, *, service: str = "payments") -> BusApp:
    app = BusApp()
    orders = app.endpoint("orders", Order)

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        key = ctx.request_effect(
            service=service, operation="charge", body={"amount": cmd.amount}, answer=ChargeAnswered
        )
        ctx.state.requested.append(key)

    @orders.handles(ChargeAnswered)
    def answered(ctx: HandlerContext[Order], answer: ChargeAnswered) -> None:
        ctx.state.answers.append((answer.key, answer.outcome))

    app.service("payments", operations={"charge": "/v1/charges"})
    add_performer(app, {"payments": provider}, call_timeout=5.0, retry=RetryPolicy(immediate=3))
    return app


async def placed(provider: InMemoryProvider, *, service: str = "payments") -> Harness:
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    harness = await Harness.create(
        backend, orders_app(provider, service=service), jitter=random.Random(7)
    )
    await harness.setup_bus.client().send(
        PlaceOrder(order="o1", amount=1200), to="orders", idempotency_key="place-o1"
    )
    await harness.run_until_quiet()
    return harness


async def test_a_committed_request_is_applied_once_and_answered_once() -> None:
    provider = InMemoryProvider()
    harness = await placed(provider)
    order = await harness.applied_state("orders", "o1", Order)
    [key] = order.requested
    assert order.answers == [(key, "succeeded")]
    assert provider.applied(key) == 1
    assert await harness.tokens_in_flight() == []


async def test_unknown_outcomes_are_retried_with_the_same_key_and_applied_once() -> None:
    provider = InMemoryProvider(lost_answers=1, unavailable=1)
    harness = await placed(provider)
    order = await harness.applied_state("orders", "o1", Order)
    [key] = order.requested
    assert provider.calls == 3
    assert [entry.key for entry in provider.ledger] == [key]
    assert order.answers == [(key, "succeeded")]


async def test_duplicate_signals_to_the_performer_apply_and_answer_once() -> None:
    provider = InMemoryProvider()
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    harness = await Harness.create(backend, orders_app(provider), jitter=random.Random(7))
    await harness.setup_bus.client().send(
        PlaceOrder(order="o1", amount=1200), to="orders", idempotency_key="place-o1"
    )
    [signal] = await harness.raw.queue("orders").receive(1, visibility_timeout=30)
    await harness.deliver("orders", signal)
    [request] = await harness.raw.queue(PERFORMER_ENDPOINT).peek(1)
    await harness.raw.queue(PERFORMER_ENDPOINT).send(request.content)
    await harness.raw.queue(PERFORMER_ENDPOINT).send(request.content)
    await harness.run_until_quiet()
    order = await harness.applied_state("orders", "o1", Order)
    [key] = order.requested
    assert provider.applied(key) == 1
    assert order.answers == [(key, "succeeded")]


async def test_a_request_for_an_undeclared_service_parks_the_requesting_message() -> None:
    provider = InMemoryProvider()
    harness = await placed(provider, service="refunds")
    [parked] = await harness.poison_messages("orders")
    poison = parked["poison"]
    assert isinstance(poison, dict)
    assert poison["reason"].startswith("UndeclaredService: no service refunds is declared")
    assert await harness.poison_messages(PERFORMER_ENDPOINT) == []
    assert provider.calls == 0


async def forged(request: EffectRequest) -> tuple[Harness, InMemoryProvider]:
    """``request`` sent straight to the performer's queue, as anyone who may send could."""
    provider = InMemoryProvider()
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    harness = await Harness.create(backend, orders_app(provider), jitter=random.Random(7))
    await harness.setup_bus.client().send(request, to=PERFORMER_ENDPOINT, idempotency_key="f")
    await harness.run_until_quiet()
    return harness, provider


def forged_request(**fields: str) -> EffectRequest:
    values = {
        "key": "k-forged",
        "service": "payments",
        "operation": "charge",
        "answer_type": "ChargeAnswered",
        "reply_to": "orders",
        "partition": "o1",
        **fields,
    }
    return EffectRequest(body={"amount": 1}, **values)


async def test_a_forged_request_naming_an_address_is_parked_with_its_name_escaped() -> None:
    harness, provider = await forged(forged_request(service="https://evil.example/\nforged: line"))
    [parked] = await harness.poison_messages(PERFORMER_ENDPOINT)
    poison = parked["poison"]
    assert isinstance(poison, dict)
    assert "no service https://evil.example/\\nforged: line" in poison["reason"]
    assert "\n" not in poison["reason"]
    assert provider.calls == 0


async def test_a_forged_request_whose_answer_type_is_not_an_answer_calls_nothing() -> None:
    harness, provider = await forged(forged_request(answer_type="PlaceOrder"))
    [parked] = await harness.poison_messages(PERFORMER_ENDPOINT)
    poison = parked["poison"]
    assert isinstance(poison, dict)
    assert "PlaceOrder is not an answer type" in poison["reason"]
    assert provider.calls == 0
    assert (await harness.applied_state("orders", "o1", Order)).answers == []
