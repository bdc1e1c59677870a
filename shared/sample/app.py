"""Two flows that exercise commands, events and deterministic handlers.

Shooting range (from the seed articles): FireAt goes to ``shootingrange``, which compares the
shot with the target's position, publishes Hit or Missed (subscribed by ``leaderboard``) and
moves the target using the message-seeded random generator.

Orders: PlaceOrder goes to ``orders``, which publishes OrderPlaced (subscribed by ``loyalty``
and ``shipping``) and sends ChargePayment to ``payments``; once charged, ``payments`` sends
ShipOrder to ``shipping``.

Orders paid later (a timeout): a PlaceOrder with ``pay_within_seconds`` is not charged by the
bus; it waits for a PaymentReceived from outside (the payment provider, through the ingress)
and ``orders`` sends itself a PaymentDue delayed by that long. If the payment comes first,
the order is paid and shipped and the timeout finds nothing to do; if the timeout comes
first, the order is cancelled, and a payment arriving after that is refunded by ``payments``
(RefundPayment). Each happens exactly once, however the messages are duplicated or retried.

``payments`` keeps its state in Table Storage, or in PostgreSQL when the environment variable
``SAMPLE_PAYMENTS_STORE`` is ``postgres`` (``make demo`` runs it so, with ``BUS_POSTGRES_URL``
naming its server). There each charge is also a row of the app's own ``sample_charges``
table (``shared.sample.charges``), written through ``ctx.sql`` in the transaction that commits the
endpoint's state and outbox record: the charge row exists once per order or not at all.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import cast

from pydantic import BaseModel, Field

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.app import Store
from shared.sample.charges import PAYMENTS_STORE

app = BusApp()

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


shooting_range = app.endpoint("shootingrange", state=Range)
leaderboard = app.endpoint("leaderboard", state=Scores)


@shooting_range.handles(FireAt)
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


@leaderboard.handles(Hit)
def count_hit(ctx: HandlerContext[Scores], event: Hit) -> None:
    ctx.state.hits += 1


@leaderboard.handles(Missed)
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


class ShipOrder(Command):
    partition_by = "order_id"
    order_id: str


class OrderPlaced(Event):
    partition_by = "customer"
    order_id: str
    customer: str
    amount_cents: int


class Order(BaseModel):
    status: str = "new"
    """orders: new, placed, awaiting_payment, paid or cancelled. payments: charged or
    refunded."""
    amount_cents: int = 0
    payment_id: str | None = None
    refunded_cents: int = 0
    """payments: what was refunded (a refund applied twice would double it)."""
    refunded_payments: list[str] = []
    """orders: the payments it sent back, so a payment reported again is not refunded twice."""


class Shipping(BaseModel):
    """Per order (partition = order id): the shipment. Per customer (partition = customer, as
    OrderPlaced is partitioned): the pick list of orders to prepare."""

    shipment_id: str | None = None
    pick_list: list[str] = []


class Customer(BaseModel):
    orders: int = 0
    points: int = 0


orders = app.endpoint("orders", state=Order)
# An unknown value is refused by the declaration itself (ConfigurationError naming it).
payments = app.endpoint(
    "payments", state=Order, store=cast(Store, os.environ.get(PAYMENTS_STORE, "table"))
)
shipping = app.endpoint("shipping", state=Shipping)
loyalty = app.endpoint("loyalty", state=Customer)


@orders.handles(PlaceOrder)
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
    # The timeout: a message to this endpoint, not processed before the window closes.
    ctx.send(
        PaymentDue(order_id=cmd.order_id),
        to="orders",
        delay=timedelta(seconds=cmd.pay_within_seconds),
    )


@orders.handles(PaymentDue)
def payment_due(ctx: HandlerContext[Order], cmd: PaymentDue) -> None:
    if ctx.state.status == "awaiting_payment":
        ctx.state.status = "cancelled"  # not paid in time
    # paid already (or never placed this way): the timeout has nothing to do


@orders.handles(PaymentReceived)
def payment_received(ctx: HandlerContext[Order], cmd: PaymentReceived) -> None:
    if ctx.state.status == "awaiting_payment":
        ctx.state.status = "paid"
        ctx.state.payment_id = cmd.payment_id
        ctx.send(ShipOrder(order_id=cmd.order_id), to="shipping")
        return
    if cmd.payment_id == ctx.state.payment_id or cmd.payment_id in ctx.state.refunded_payments:
        return  # the provider reported a payment again (under a new key): handled already
    # Too late (cancelled), a second payment, or for an order we do not know: give it back.
    ctx.state.refunded_payments.append(cmd.payment_id)
    refund = RefundPayment(
        order_id=cmd.order_id, payment_id=cmd.payment_id, amount_cents=cmd.amount_cents
    )
    ctx.send(refund, to="payments")


@payments.handles(ChargePayment)
async def charge(ctx: HandlerContext[Order], cmd: ChargePayment) -> None:
    ctx.state.status = "charged"
    ctx.state.amount_cents += cmd.amount_cents  # doubles if a charge were ever applied twice
    ctx.state.payment_id = ctx.new_id()
    if ctx.sql is not None:  # PostgreSQL: the app's row commits with the bus's rows
        await ctx.sql.execute(
            "INSERT INTO sample_charges (order_id, payment_id, amount_cents, charged_at) "
            "VALUES ($1, $2, $3, $4)",
            cmd.order_id,
            ctx.state.payment_id,
            cmd.amount_cents,
            ctx.now(),
        )
    ctx.send(ShipOrder(order_id=cmd.order_id), to="shipping")


@payments.handles(RefundPayment)
def refund(ctx: HandlerContext[Order], cmd: RefundPayment) -> None:
    ctx.state.status = "refunded"
    ctx.state.payment_id = cmd.payment_id
    ctx.state.refunded_cents += cmd.amount_cents  # doubles if a refund were ever applied twice


@shipping.handles(OrderPlaced)
def prepare(ctx: HandlerContext[Shipping], event: OrderPlaced) -> None:
    ctx.state.pick_list.append(event.order_id)


@shipping.handles(ShipOrder)
def ship(ctx: HandlerContext[Shipping], cmd: ShipOrder) -> None:
    ctx.state.shipment_id = ctx.new_id()


@loyalty.handles(OrderPlaced)
def reward(ctx: HandlerContext[Customer], event: OrderPlaced) -> None:
    ctx.state.orders += 1
    ctx.state.points += event.amount_cents // 100
