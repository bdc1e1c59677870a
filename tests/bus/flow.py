"""A small order flow used by the pipeline tests.

orders --ChargeCard--> payments --ShipOrder--> shipping (a chain of three endpoints), and
orders publishes OrderPlaced to loyalty and shipping (an event with two subscribers). Every
handler appends the incoming message id to its partition's state, so a duplicate processing
shows up as a repeated id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.app import Mode


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str
    amount: int


class ChargeCard(Command):
    partition_by = "order_id"
    order_id: str
    amount: int


class ShipOrder(Command):
    partition_by = "order_id"
    order_id: str


class OrderPlaced(Event):
    partition_by = "customer"
    order_id: str
    customer: str


class Ledger(BaseModel):
    """Which messages were applied to this partition, in order."""

    applied: list[str] = []
    total: int = 0


@dataclass(frozen=True)
class FlowNames:
    orders: str
    payments: str
    shipping: str
    loyalty: str

    @classmethod
    def with_suffix(cls, suffix: str) -> FlowNames:
        return cls(f"orders{suffix}", f"payments{suffix}", f"shipping{suffix}", f"loyalty{suffix}")

    @property
    def all(self) -> list[str]:
        return [self.orders, self.payments, self.shipping, self.loyalty]


def build_flow(
    names: FlowNames,
    *,
    publish: bool = True,
    charge: bool = True,
    mode: Mode | Sequence[Mode] = "token",
) -> BusApp:
    """``mode`` is every endpoint's mode, or one per endpoint (orders, payments, shipping,
    loyalty) for a flow whose endpoints interoperate across modes."""
    modes = [mode] * 4 if isinstance(mode, str) else list(mode)
    app = BusApp()
    orders = app.endpoint(names.orders, state=Ledger, mode=modes[0])
    payments = app.endpoint(names.payments, state=Ledger, mode=modes[1])
    shipping = app.endpoint(names.shipping, state=Ledger, mode=modes[2])
    loyalty = app.endpoint(names.loyalty, state=Ledger, mode=modes[3])

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Ledger], cmd: PlaceOrder) -> None:
        ctx.state.applied.append(ctx.message_id)
        ctx.state.total += cmd.amount
        if charge:
            ctx.send(ChargeCard(order_id=cmd.order_id, amount=cmd.amount), to=names.payments)
        if publish:
            ctx.publish(OrderPlaced(order_id=cmd.order_id, customer=f"c-{cmd.order_id}"))

    @payments.handles(ChargeCard)
    async def charge_card(ctx: HandlerContext[Ledger], cmd: ChargeCard) -> None:
        ctx.state.applied.append(ctx.message_id)
        ctx.state.total += cmd.amount
        ctx.send(ShipOrder(order_id=cmd.order_id), to=names.shipping)

    @shipping.handles(ShipOrder)
    def ship(ctx: HandlerContext[Ledger], cmd: ShipOrder) -> None:
        ctx.state.applied.append(ctx.message_id)

    @shipping.handles(OrderPlaced)
    def prepare(ctx: HandlerContext[Ledger], event: OrderPlaced) -> None:
        ctx.state.applied.append(ctx.message_id)

    @loyalty.handles(OrderPlaced)
    def reward(ctx: HandlerContext[Ledger], event: OrderPlaced) -> None:
        ctx.state.applied.append(ctx.message_id)
        ctx.state.total += 1

    return app
