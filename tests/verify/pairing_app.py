"""Issue 42's mixed-mode app: ``tickets`` (state_based) publishes Stamped, to which
``ledger`` (token mode) subscribes."""

from __future__ import annotations

from pydantic import BaseModel

from shared.bus import BusApp, Command, Event, HandlerContext


class Stamp(Command):
    partition_by = "ticket"
    ticket: str


class Stamped(Event):
    partition_by = "ticket"
    ticket: str


class Tally(BaseModel):
    count: int = 0


def stamp(ctx: HandlerContext[Tally], message: Stamp) -> None:
    ctx.state.count += 1
    ctx.publish(Stamped(ticket=message.ticket))


def note(ctx: HandlerContext[Tally], message: Stamped) -> None:
    ctx.state.count += 1


app = BusApp()
app.endpoint("tickets", Tally, mode="state_based").handles(Stamp)(stamp)
app.endpoint("ledger", Tally).handles(Stamped)(note)
examples = [Stamp(ticket="t1")]
