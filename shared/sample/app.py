"""Two flows that exercise commands, events and deterministic handlers.

Shooting range (from the seed articles): FireAt goes to ``shootingrange``, which compares the
shot with the target's position, publishes Hit or Missed (subscribed by ``leaderboard``) and
moves the target using the message-seeded random generator.

Orders: PlaceOrder goes to ``orders``, which publishes OrderPlaced (subscribed by ``loyalty``
and ``shipping``) and sends ChargePayment to ``payments``; once charged, ``payments`` sends
ShipOrder to ``shipping``.

``payments`` keeps its state in Table Storage, or in PostgreSQL when the environment variable
``SAMPLE_PAYMENTS_STORE`` is ``postgres`` (``make demo`` runs it so, with ``BUS_POSTGRES_URL``
naming its server). There each charge is also a row of the app's own ``sample_charges``
table (``shared.sample.charges``), written through ``ctx.sql`` in the transaction that commits the
endpoint's state and outbox record: the charge row exists once per order or not at all.
"""

from __future__ import annotations

import os
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
    amount_cents: int = 0
    payment_id: str | None = None


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
    ctx.state.status = "placed"
    ctx.state.amount_cents = cmd.amount_cents
    ctx.publish(
        OrderPlaced(order_id=cmd.order_id, customer=cmd.customer, amount_cents=cmd.amount_cents)
    )
    ctx.send(ChargePayment(order_id=cmd.order_id, amount_cents=cmd.amount_cents), to="payments")


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
