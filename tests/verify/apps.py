"""Small users' apps for ``bus verify``'s tests: one whose state-based handler reads the
system clock, one that reads Python's random module, a well-behaved one (run with the
examples declared here, or with generated messages), and one whose endpoints keep their rows
in PostgreSQL and in a table."""

from __future__ import annotations

import random
import time

from pydantic import BaseModel

from shared.bus import BusApp, Command, DoNotRetry, HandlerContext


class Stamp(Command):
    partition_by = "ticket"
    ticket: str


class Ticket(BaseModel):
    stamped_at: float | None = None
    lucky: float | None = None
    count: int = 0


def stamp_with_clock(ctx: HandlerContext[Ticket], message: Stamp) -> None:
    ctx.state.stamped_at = time.time()  # the system clock: another value on every run


def stamp_with_random(ctx: HandlerContext[Ticket], message: Stamp) -> None:
    ctx.state.lucky = random.random()  # the unseeded module: another value on every run


def count(ctx: HandlerContext[Ticket], message: Stamp) -> None:
    ctx.state.count += 1


def _app(handler: object) -> BusApp:
    app = BusApp()
    app.endpoint("tickets", Ticket, mode="state_based").handles(Stamp)(handler)  # type: ignore[arg-type]
    return app


class Stamped(Command):
    partition_by = "ticket"
    ticket: str


def count_and_tell(ctx: HandlerContext[Ticket], message: Stamp) -> None:
    ctx.state.count += 1
    ctx.send(Stamped(ticket=message.ticket), to="ledger")


def note(ctx: HandlerContext[Ticket], message: Stamped) -> None:
    ctx.state.count += 1


def refuse(ctx: HandlerContext[Ticket], message: Stamped) -> None:
    raise DoNotRetry(f"no ledger for {message.ticket}")  # a business rule, on every run


clock_app = _app(stamp_with_clock)
random_app = _app(stamp_with_random)
counting_app = _app(count)
chain_app = BusApp()
"""tickets tells ledger of every stamp."""
chain_app.endpoint("tickets", Ticket).handles(Stamp)(count_and_tell)
chain_app.endpoint("ledger", Ticket).handles(Stamped)(note)
refusing_app = BusApp()
"""ledger refuses every stamp: parked in the fault-free run too."""
refusing_app.endpoint("tickets", Ticket).handles(Stamp)(count_and_tell)
refusing_app.endpoint("ledger", Ticket).handles(Stamped)(refuse)
mixed_store_app = BusApp()
"""Rows in PostgreSQL for one endpoint, in its table for the other."""
mixed_store_app.endpoint("tickets", Ticket, store="postgres").handles(Stamp)(count_and_tell)
mixed_store_app.endpoint("ledger", Ticket).handles(Stamped)(note)
examples = [Stamp(ticket="t1")]
"""The examples the apps of this module declare (``counting_app`` is run without them)."""
