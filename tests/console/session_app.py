"""The app the console's session tests look at: web requests of a storefront write their order
row and send PlaceOrder to ``orders`` in one transactional session (``storefront`` and
``kiosk`` take sessions; ``orders`` does not)."""

from __future__ import annotations

from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext

STOREFRONT = "storefront"
KIOSK = "kiosk"
ORDERS = "orders"
APP = "tests.console.session_app:app"


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str


class Taken(BaseModel):
    orders: list[str] = []


def take(ctx: HandlerContext[Taken], command: PlaceOrder) -> None:
    ctx.state.orders.append(command.order_id)


app = BusApp()
app.endpoint(STOREFRONT, sessions=True)
app.endpoint(KIOSK, sessions=True)
app.endpoint(ORDERS, state=Taken).handles(PlaceOrder)(take)
