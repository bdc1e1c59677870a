"""A user's app, as a user writes one: orders are charged through a payment service, paid
orders are baked by the kitchen and handed to the couriers; an order still unpaid after
15 minutes is cancelled. The kit's tests test it as its author would."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.effects import EffectAnswered

app = BusApp()
app.service("payments", operations={"charge": "/v1/charges"})

PAYMENT_TIMEOUT = timedelta(minutes=15)
MOST_CAKES = 100


class PlaceOrder(Command):
    partition_by = "order"
    order: str
    cakes: int = Field(gt=0)


class CancelIfUnpaid(Command):
    partition_by = "order"
    order: str


class Charged(EffectAnswered):
    pass


class OrderPaid(Event):
    partition_by = "order"
    order: str
    cakes: int


class Deliver(Command):
    partition_by = "order"
    order: str
    cakes: int


class Order(BaseModel):
    status: str = "new"
    cakes: int = 0


class Oven(BaseModel):
    baked: int = 0


class Round(BaseModel):
    delivered: list[str] = []


orders = app.endpoint("orders", Order)
kitchen = app.endpoint("kitchen", Oven)
couriers = app.endpoint("couriers", Round)


@orders.handles(PlaceOrder)
def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
    if cmd.cakes > MOST_CAKES:
        raise ValueError(f"we cannot bake {cmd.cakes} cakes")
    ctx.state.status, ctx.state.cakes = "placed", cmd.cakes
    ctx.request_effect(
        service="payments", operation="charge", body={"cents": 300 * cmd.cakes}, answer=Charged
    )
    ctx.send(CancelIfUnpaid(order=cmd.order), to="orders", delay=PAYMENT_TIMEOUT)


@orders.handles(Charged)
def charged(ctx: HandlerContext[Order], answer: Charged) -> None:
    if ctx.state.status != "placed":
        return
    if answer.outcome != "succeeded":
        ctx.state.status = "declined"
        return
    ctx.state.status = "paid"
    ctx.publish(OrderPaid(order=ctx.partition_key, cakes=ctx.state.cakes))


@orders.handles(CancelIfUnpaid)
def cancel(ctx: HandlerContext[Order], cmd: CancelIfUnpaid) -> None:
    if ctx.state.status == "placed":
        ctx.state.status = "cancelled"


@kitchen.handles(OrderPaid)
def bake(ctx: HandlerContext[Oven], event: OrderPaid) -> None:
    ctx.state.baked += event.cakes
    ctx.send(Deliver(order=event.order, cakes=event.cakes), to="couriers")


@couriers.handles(Deliver)
def deliver(ctx: HandlerContext[Round], cmd: Deliver) -> None:
    ctx.state.delivered.append(cmd.order)
