"""The app the console's saga tests look at: a saga ``checkout`` started by ``Start`` and
completed by ``Finish`` (``Poke`` starts nothing), beside an ordinary endpoint ``ledger``."""

from __future__ import annotations

from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext

CHECKOUT = "checkout"
LEDGER = "ledger"
APP = "tests.console.saga_app:app"


class Start(Command):
    partition_by = "order_id"
    order_id: str


class Finish(Command):
    partition_by = "order_id"
    order_id: str


class Poke(Command):
    partition_by = "order_id"
    order_id: str


class Order(BaseModel):
    steps: list[str] = []


app = BusApp()
checkout = app.saga(CHECKOUT, Order, started_by=[Start])
app.endpoint(LEDGER)


@checkout.handles(Start)
def start(ctx: HandlerContext[Order], msg: Start) -> None:
    ctx.state.steps.append("started")


@checkout.handles(Poke)
def poke(ctx: HandlerContext[Order], msg: Poke) -> None:
    ctx.state.steps.append("poked")


@checkout.handles(Finish)
def finish(ctx: HandlerContext[Order], msg: Finish) -> None:
    ctx.complete()
