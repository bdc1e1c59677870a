"""Version 2 of the rolling-deploy test's app (``app_v1`` is version 1), differing from it in
the four ways a message evolves:

- PlaceOrder has a new optional field, ``gift_wrap`` (version 1 ignores it);
- ReserveStock is renamed HoldStock, declaring its former name, so that what version 1
  senders still send is read as HoldStock;
- OrderPlaced is at version 2 (``total_cents`` and ``currency`` for ``amount_cents``), and
  reads version 1's shape through its upcaster;
- ShipOrder lost ``priority``, which no receiver required.

Version 2 also raised the order limit: an order version 1 parked is processed here."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field

from shared.bus import BusApp, Command, Event, HandlerContext

VERSION = "v2"
CURRENCY = "EUR"

app = BusApp()


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str
    amount_cents: int = Field(gt=0)
    gift_wrap: bool = False


class HoldStock(Command):
    partition_by = "order_id"
    former_names = ("ReserveStock",)
    order_id: str
    quantity: int = Field(gt=0)


class ShipOrder(Command):
    partition_by = "order_id"
    order_id: str


class OrderPlacedV1(BaseModel):
    """OrderPlaced as version 1 of the app published it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    order_id: str
    amount_cents: int


class OrderPlaced(Event):
    partition_by = "order_id"
    version = 2
    previous = OrderPlacedV1
    order_id: str
    total_cents: int
    currency: str

    @classmethod
    def upcast(cls, old: OrderPlacedV1) -> Self:
        # Version 1 only ever took euros.
        return cls(order_id=old.order_id, total_cents=old.amount_cents, currency=CURRENCY)


class Handled(BaseModel):
    """What an endpoint keeps per order: how often it processed a message of it, and which
    version did."""

    count: int = 0
    by: str = ""
    total_cents: int = 0


orders = app.endpoint("orders", state=Handled)
stock = app.endpoint("stock", state=Handled)
shipping = app.endpoint("shipping", state=Handled)
ledger = app.endpoint("ledger", state=Handled)


def handled(state: Handled, total_cents: int = 0) -> None:
    state.count += 1
    state.by = VERSION
    state.total_cents = total_cents


@orders.handles(PlaceOrder)
def place(ctx: HandlerContext[Handled], order: PlaceOrder) -> None:
    handled(ctx.state, order.amount_cents)
    ctx.send(HoldStock(order_id=order.order_id, quantity=1), to="stock")
    ctx.send(ShipOrder(order_id=order.order_id), to="shipping")
    published = OrderPlaced(
        order_id=order.order_id, total_cents=order.amount_cents, currency=CURRENCY
    )
    ctx.publish(published)


@stock.handles(HoldStock)
def hold(ctx: HandlerContext[Handled], command: HoldStock) -> None:
    handled(ctx.state)


@shipping.handles(ShipOrder)
def ship(ctx: HandlerContext[Handled], command: ShipOrder) -> None:
    handled(ctx.state)


@ledger.handles(OrderPlaced)
def book(ctx: HandlerContext[Handled], event: OrderPlaced) -> None:
    handled(ctx.state, event.total_cents)
