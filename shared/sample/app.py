"""Two flows that exercise commands, events and deterministic handlers.

Shooting range (from the seed articles): FireAt goes to ``shootingrange``, which compares the
shot with the target's position, publishes Hit or Missed (subscribed by ``leaderboard``) and
moves the target using the message-seeded random generator.

Orders: PlaceOrder goes to ``orders``, which publishes OrderPlaced (subscribed by ``loyalty``
and ``shipping``) and sends ChargePayment to ``payments``. ``payments`` does not call the
payment provider itself: it requests a ``charge`` effect of the declared service ``provider``
(``docs/effects.md``), performed once the request is committed, under a key that every retry
and copy of the ChargePayment repeats, so the card is charged once. The answer comes back as
a ChargeAnswered: charged, ``payments`` records the provider's charge id and sends ShipOrder
to ``shipping``; declined (the provider refused for good, as for a declined card), it records
that and tells ``orders`` (PaymentDeclined), which marks the order declined: it is not shipped
and nothing is retried; the customer places a new order. A second ChargePayment for an order
already charged (or being charged) requests nothing.

Orders paid later (a timeout): a PlaceOrder with ``pay_within_seconds`` is not charged by the
bus; the customer pays at the provider, which reports it (PaymentReceived, through the
ingress), and ``orders`` sends itself a PaymentDue delayed by that long. If the payment comes
first, the order is paid and shipped and the timeout finds nothing to do; if the timeout comes
first, the order is cancelled, and a payment arriving after that is given back: ``payments``
requests a ``refund`` effect of the provider (RefundPayment, answered by RefundAnswered). Each
happens exactly once, however the messages are duplicated or retried.

The provider's address and credential are app settings (``BUS_SERVICE_PROVIDER_URL``,
``BUS_SERVICE_PROVIDER_CREDENTIAL``); the product adds the performer endpoint that calls it to
the loaded app. ``make demo`` points them at the local provider (``python -m lab.provider``).
``build_app()`` builds a fresh app (tests add a performer with a provider of their own);
``app`` is the one the product loads.

Orders from the web: ``POST /api/orders`` (the app's own route, ``accept_order``) records the
order row and sends PlaceOrder to ``orders`` in one transactional session of the endpoint
``storefront``, both or neither; a client's retry under the same ``Idempotency-Key`` writes
and sends nothing new (``shared.sample.storefront``, ``docs/sessions.md``). Its rows are in
Table Storage, or in PostgreSQL with the order in the app's own ``sample_orders`` table when
``SAMPLE_STOREFRONT_STORE`` is ``postgres``.

``payments`` keeps its state in Table Storage, or in PostgreSQL when the environment variable
``SAMPLE_PAYMENTS_STORE`` is ``postgres`` (``make demo`` runs it so, with ``BUS_POSTGRES_URL``
naming its server). There each charge is also a row of the app's own ``sample_charges``
table (``shared.sample.charges``), written through ``ctx.sql`` when the charge's answer is
processed, in the transaction that commits the endpoint's state and outbox record: the charge
row exists once per charged order or not at all.

``shipping`` and ``loyalty`` keep their rows in Table Storage, or in the document store that
``SAMPLE_SHIPPING_STORE`` and ``SAMPLE_LOYALTY_STORE`` name (``shared.sample.stores``;
``make demo`` keeps loyalty's as blob documents and shipping's in Cosmos DB).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import cast

from pydantic import BaseModel, Field

from shared.bus import Bus, BusApp, Command, Event, HandlerContext
from shared.bus.app import Store
from shared.bus.effects import EffectAnswered
from shared.bus.handles import MessageHandle
from shared.clock import to_datetime
from shared.sample.charges import PAYMENTS_STORE, PROVIDER
from shared.sample.storefront import (
    STOREFRONT,
    STOREFRONT_STORE,
    NewOrder,
    order_answer,
    record_order,
)
from shared.sample.stores import LOYALTY_STORE, SHIPPING_STORE, store_named_by
from shared.web import WebRequest, WebResponse

CURRENCY = "eur"
MAX_PROVIDER_ID_CHARS = 255

# --- shooting range -------------------------------------------------------------------------


class FireAt(Command):
    partition_by = "game_id"
    game_id: str
    position: int = Field(ge=0, le=9)


class Hit(Event):
    partition_by = "game_id"
    game_id: str
    position: int


class Missed(Event):
    partition_by = "game_id"
    game_id: str
    position: int


class Range(BaseModel):
    target: int | None = None
    shots: int = 0


class Scores(BaseModel):
    hits: int = 0
    misses: int = 0


def fire_at(ctx: HandlerContext[Range], shot: FireAt) -> None:
    state = ctx.state
    if state.target is None:
        state.target = ctx.randint(0, 9)
    state.shots += 1
    if shot.position == state.target:
        ctx.publish(Hit(game_id=shot.game_id, position=shot.position))
    else:
        ctx.publish(Missed(game_id=shot.game_id, position=shot.position))
    state.target = ctx.randint(0, 9)  # the target moves after every shot


def count_hit(ctx: HandlerContext[Scores], event: Hit) -> None:
    ctx.state.hits += 1


def count_miss(ctx: HandlerContext[Scores], event: Missed) -> None:
    ctx.state.misses += 1


# --- orders ---------------------------------------------------------------------------------


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str
    customer: str
    amount_cents: int = Field(gt=0)
    pay_within_seconds: int | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    """Set: the customer pays later (PaymentReceived) and the order is cancelled if not paid
    within this long. None: charged at once (ChargePayment)."""


class PaymentReceived(Command):
    """From the payment provider: the customer paid ``amount_cents`` for the order."""

    partition_by = "order_id"
    order_id: str
    payment_id: str
    amount_cents: int = Field(gt=0)


class PaymentDue(Command):
    """The timeout ``orders`` sends itself: the order's payment window has closed."""

    partition_by = "order_id"
    order_id: str


class RefundPayment(Command):
    partition_by = "order_id"
    order_id: str
    payment_id: str
    amount_cents: int


class ChargePayment(Command):
    partition_by = "order_id"
    order_id: str
    amount_cents: int


class ChargeAnswered(EffectAnswered):
    """The provider's answer to a charge ``payments`` requested (partition: the order id)."""


class RefundAnswered(EffectAnswered):
    """The provider's answer to a refund ``payments`` requested (partition: the order id)."""


class PaymentDeclined(Command):
    """From ``payments`` to ``orders``: the provider refused the charge for good."""

    partition_by = "order_id"
    order_id: str


class ShipOrder(Command):
    partition_by = "order_id"
    order_id: str


class OrderShipped(Command):
    """From ``shipping`` to ``orders``: the order left the warehouse; its checkout is done."""

    partition_by = "order_id"
    order_id: str


class OrderPlaced(Event):
    partition_by = "customer"
    order_id: str
    customer: str
    amount_cents: int


class Order(BaseModel):
    """The checkout of one order, a saga instance of ``orders`` (``add_checkout``)."""

    status: str = "new"
    """new, placed, awaiting_payment or paid while it lives; it completes when the order is
    shipped, declined or cancelled."""
    amount_cents: int = 0
    payment_id: str | None = None
    refunded_payments: list[str] = []
    """The payments it sent back, so a payment reported again is not refunded twice."""
    deadline: MessageHandle | None = None
    """The payment window's timeout, cancelled when the payment comes first."""


class Refund(BaseModel):
    payment_id: str
    amount_cents: int
    outcome: str | None = None
    """None until the provider's answer is processed."""


class Payment(BaseModel):
    """``payments``, per order: the charge asked of the provider and its answer, and the
    refunds of payments that came too late."""

    status: str = "new"
    """new, charging, charged, declined or uncertain for a charge; refunding, refunded or
    refund_failed for a late payment."""
    amount_cents: int = 0
    """What the provider charged (a charge answer processed twice would double it)."""
    charge_key: str | None = None
    """The charge effect's idempotency key, once requested."""
    charge_cents: int = 0
    payment_id: str | None = None
    """The provider's charge id, or the late payment's id."""
    declined: str | None = None
    """The provider's reason, for a declined charge."""
    refunds: dict[str, Refund] = {}
    """Per refund effect's key."""
    refunded_cents: int = 0
    """What was refunded (a refund answer processed twice would double it)."""


class Shipping(BaseModel):
    """Per order (partition = order id): the shipment. Per customer (partition = customer, as
    OrderPlaced is partitioned): the pick list of orders to prepare."""

    shipment_id: str | None = None
    pick_list: list[str] = []


class Customer(BaseModel):
    orders: int = 0
    points: int = 0


def place_order(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
    if ctx.state.status != "new":
        return  # the same order id placed twice by a client: keep the first
    ctx.state.amount_cents = cmd.amount_cents
    ctx.publish(
        OrderPlaced(order_id=cmd.order_id, customer=cmd.customer, amount_cents=cmd.amount_cents)
    )
    if cmd.pay_within_seconds is None:
        ctx.state.status = "placed"
        ctx.send(ChargePayment(order_id=cmd.order_id, amount_cents=cmd.amount_cents), to="payments")
        return
    ctx.state.status = "awaiting_payment"
    # The timeout: a message to this instance, not processed before the window closes, and
    # cancelled if the payment comes first.
    window = timedelta(seconds=cmd.pay_within_seconds)
    ctx.state.deadline = ctx.request_timeout(PaymentDue(order_id=cmd.order_id), delay=window)


def payment_due(ctx: HandlerContext[Order], cmd: PaymentDue) -> None:
    if ctx.state.status == "awaiting_payment":
        ctx.complete()  # not paid in time: the order is cancelled, its checkout over
    # paid already, and the cancel of this timeout lost the race: nothing to do


def payment_received(ctx: HandlerContext[Order], cmd: PaymentReceived) -> None:
    if ctx.state.status == "awaiting_payment":
        ctx.state.status = "paid"
        ctx.state.payment_id = cmd.payment_id
        if ctx.state.deadline is not None:
            ctx.cancel(ctx.state.deadline)
        ctx.send(ShipOrder(order_id=cmd.order_id), to="shipping")
        return
    if cmd.payment_id == ctx.state.payment_id or cmd.payment_id in ctx.state.refunded_payments:
        return  # the provider reported a payment again (under a new key): handled already
    # A second payment for an order being paid for or charged: give it back.
    ctx.state.refunded_payments.append(cmd.payment_id)
    give_back(ctx, cmd)


def give_back(ctx: HandlerContext[Order], cmd: PaymentReceived) -> None:
    """A payment for an order whose checkout is over (cancelled, shipped, declined) or never
    began: refunded. ``payments`` refunds each payment once, however often it is reported."""
    refund = RefundPayment(
        order_id=cmd.order_id, payment_id=cmd.payment_id, amount_cents=cmd.amount_cents
    )
    ctx.send(refund, to="payments")


def payment_declined(ctx: HandlerContext[Order], cmd: PaymentDeclined) -> None:
    if ctx.state.status == "placed":
        ctx.complete()  # declined: the customer places a new order


def order_shipped(ctx: HandlerContext[Order], cmd: OrderShipped) -> None:
    ctx.complete()


def charge(ctx: HandlerContext[Payment], cmd: ChargePayment) -> None:
    if ctx.state.charge_key is not None:
        return  # charged, or being charged: a second ChargePayment must not charge again
    body = {"order": cmd.order_id, "amount": cmd.amount_cents, "currency": CURRENCY}
    key = ctx.request_effect(service=PROVIDER, operation="charge", body=body, answer=ChargeAnswered)
    ctx.state.status = "charging"
    ctx.state.charge_key = key
    ctx.state.charge_cents = cmd.amount_cents


async def charge_answered(ctx: HandlerContext[Payment], answer: ChargeAnswered) -> None:
    state = ctx.state
    if answer.key != state.charge_key or state.status != "charging":
        return  # not the charge this order asked for, or answered already
    if answer.outcome == "failed":  # refused for good, as a declined card is
        state.status = "declined"
        state.declined = _provider_text(answer.body.get("error"))
        ctx.send(PaymentDeclined(order_id=answer.partition), to="orders")
        return
    if answer.outcome == "uncertain":  # only from an at-most-once service: for a person
        state.status = "uncertain"
        return
    state.status = "charged"
    state.amount_cents += state.charge_cents
    state.payment_id = _provider_id(answer)
    if ctx.sql is not None:  # PostgreSQL: the app's row commits with the bus's rows
        await ctx.sql.execute(
            "INSERT INTO sample_charges (order_id, payment_id, amount_cents, charged_at) "
            "VALUES ($1, $2, $3, $4)",
            answer.partition,
            state.payment_id,
            state.charge_cents,
            ctx.now(),
        )
    ctx.send(ShipOrder(order_id=answer.partition), to="shipping")


def refund(ctx: HandlerContext[Payment], cmd: RefundPayment) -> None:
    if any(r.payment_id == cmd.payment_id for r in ctx.state.refunds.values()):
        return  # this payment is being (or was) given back already
    body = {"order": cmd.order_id, "amount": cmd.amount_cents}
    key = ctx.request_effect(service=PROVIDER, operation="refund", body=body, answer=RefundAnswered)
    ctx.state.refunds[key] = Refund(payment_id=cmd.payment_id, amount_cents=cmd.amount_cents)
    ctx.state.status = "refunding"
    ctx.state.payment_id = cmd.payment_id


def refund_answered(ctx: HandlerContext[Payment], answer: RefundAnswered) -> None:
    asked = ctx.state.refunds.get(answer.key)
    if asked is None or asked.outcome is not None:
        return  # not a refund this order asked for, or answered already
    asked.outcome = answer.outcome
    if answer.outcome == "succeeded":
        ctx.state.refunded_cents += asked.amount_cents
        ctx.state.status = "refunded"
    else:
        ctx.state.status = "refund_failed"  # for a person: the provider kept the money


def _provider_id(answer: EffectAnswered) -> str:
    """The provider's id of what it applied; its answer is not trusted to carry a usable one,
    and the effect's key names the charge as well."""
    given = answer.body.get("id")
    if isinstance(given, str) and 0 < len(given) <= MAX_PROVIDER_ID_CHARS:
        return given
    return answer.key


def _provider_text(error: object) -> str:
    """The provider's reason for a refusal, kept short (it is shown to operators)."""
    reason = error.get("code") if isinstance(error, dict) else error
    return str(reason)[:MAX_PROVIDER_ID_CHARS] if reason is not None else "refused"


def prepare(ctx: HandlerContext[Shipping], event: OrderPlaced) -> None:
    ctx.state.pick_list.append(event.order_id)


def ship(ctx: HandlerContext[Shipping], cmd: ShipOrder) -> None:
    ctx.state.shipment_id = ctx.new_id()
    ctx.send(OrderShipped(order_id=cmd.order_id), to="orders")


def reward(ctx: HandlerContext[Customer], event: OrderPlaced) -> None:
    ctx.state.orders += 1
    ctx.state.points += event.amount_cents // 100


async def accept_order(request: WebRequest, bus: Bus) -> WebResponse:
    """``POST /api/orders``: the order row and its PlaceOrder in one session, once per key."""
    key, scope = request.idempotency_key(), request.scope(bus.config)
    order = request.model(NewOrder)
    async with bus.session(STOREFRONT, partition=order.order_id, key=key, scope=scope) as s:
        if not s.deduplicated:
            await record_order(s, order, to_datetime(bus.config.clock()))
            placed = PlaceOrder(
                order_id=order.order_id, customer=order.customer, amount_cents=order.amount_cents
            )
            s.send(placed, to="orders")
    return order_answer(order, s)


def build_app() -> BusApp:
    """The sample app: its endpoints, their handlers and the payment provider it calls."""
    app = BusApp()
    shooting_range = app.endpoint("shootingrange", state=Range)
    shooting_range.handles(FireAt)(fire_at)
    leaderboard = app.endpoint("leaderboard", state=Scores)
    leaderboard.handles(Hit)(count_hit)
    leaderboard.handles(Missed)(count_miss)

    add_checkout(app)
    # An unknown value is refused by the declaration itself (ConfigurationError naming it).
    store = cast(Store, os.environ.get(PAYMENTS_STORE, "table"))
    payments = app.endpoint("payments", state=Payment, store=store)
    payments.handles(ChargePayment)(charge)
    payments.handles(ChargeAnswered)(charge_answered)
    payments.handles(RefundPayment)(refund)
    payments.handles(RefundAnswered)(refund_answered)
    app.service(PROVIDER, operations={"charge": "/v1/charges", "refund": "/v1/refunds"})

    shipping = app.endpoint("shipping", state=Shipping, store=store_named_by(SHIPPING_STORE))
    shipping.handles(OrderPlaced)(prepare)
    shipping.handles(ShipOrder)(ship)
    loyalty = app.endpoint("loyalty", state=Customer, store=store_named_by(LOYALTY_STORE))
    loyalty.handles(OrderPlaced)(reward)
    add_storefront(app)
    return app


def add_checkout(app: BusApp) -> None:
    """The saga ``orders``: one instance per order, started by PlaceOrder, waiting for its
    payment with a cancellable deadline, completed when the order is shipped, declined or
    cancelled; a payment that finds no checkout is given back (``docs/sagas.md``). Declared
    once for the sample app and the sample system's ``orders`` app."""
    orders = app.saga(
        "orders",
        Order,
        started_by=[PlaceOrder],
        correlate={
            PlaceOrder: "order_id",
            PaymentReceived: "order_id",
            PaymentDeclined: "order_id",
            OrderShipped: "order_id",
        },
    )
    orders.handles(PlaceOrder)(place_order)
    orders.handles(PaymentDue)(payment_due)
    orders.handles(PaymentReceived)(payment_received)
    orders.handles(PaymentDeclined)(payment_declined)
    orders.handles(OrderShipped)(order_shipped)
    orders.not_found(PaymentReceived)(give_back)


def add_storefront(app: BusApp) -> None:
    """The endpoint ``storefront`` (sessions only, its rows where ``SAMPLE_STOREFRONT_STORE``
    says) and the route ``POST /api/orders`` that places orders in its sessions: one
    declaration for the sample app and the sample system's ``orders`` app, which also runs the
    endpoint ``orders`` the sessions send PlaceOrder to."""
    storefront_store = cast(Store, os.environ.get(STOREFRONT_STORE, "table"))
    app.endpoint(STOREFRONT, store=storefront_store, sessions=True)
    app.route("orders", methods=["POST"])(accept_order)


app = build_app()

examples = [
    FireAt(game_id="game-1", position=3),
    PlaceOrder(order_id="order-1", customer="ada", amount_cents=1250),
]
"""What ``bus verify`` sends the app at the start of every run (docs/verify.md)."""
