"""Version 1 of the rolling-deploy test's app (tests/rolling/test_rolling_deploy.py): an
order fans out to three endpoints. ``orders`` takes PlaceOrder, sends ReserveStock to
``stock`` and ShipOrder to ``shipping``, and publishes OrderPlaced, which ``ledger``
subscribes to. Every handler records in its state that version 1 processed the message, so
the test can tell which version read what.

Version 1 refuses orders over ``LIMIT_CENTS`` for good (DoNotRetry: parked); version 2
raised the limit, so such an order is processed once it is replayed after the upgrade."""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.bus import BusApp, Command, DoNotRetry, Event, HandlerContext

VERSION = "v1"
LIMIT_CENTS = 100_000

app = BusApp()


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str
    amount_cents: int = Field(gt=0)


class ReserveStock(Command):
    """Renamed HoldStock in version 2."""

    partition_by = "order_id"
    order_id: str
    quantity: int = Field(gt=0)


class ShipOrder(Command):
    """Version 1 sends ``priority``; no receiver requires it, and version 2 removed it."""

    partition_by = "order_id"
    order_id: str
    priority: str = "normal"


class OrderPlaced(Event):
    """Version 1 of the event: version 2 reads it through an upcaster."""

    partition_by = "order_id"
    order_id: str
    amount_cents: int


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
    if order.amount_cents > LIMIT_CENTS:
        raise DoNotRetry(f"version 1 takes orders up to {LIMIT_CENTS} cents")
    handled(ctx.state, order.amount_cents)
    ctx.send(ReserveStock(order_id=order.order_id, quantity=1), to="stock")
    ctx.send(ShipOrder(order_id=order.order_id, priority="express"), to="shipping")
    ctx.publish(OrderPlaced(order_id=order.order_id, amount_cents=order.amount_cents))


@stock.handles(ReserveStock)
def reserve(ctx: HandlerContext[Handled], command: ReserveStock) -> None:
    handled(ctx.state)


@shipping.handles(ShipOrder)
def ship(ctx: HandlerContext[Handled], command: ShipOrder) -> None:
    handled(ctx.state)


@ledger.handles(OrderPlaced)
def book(ctx: HandlerContext[Handled], event: OrderPlaced) -> None:
    handled(ctx.state, event.amount_cents)
