"""Small users' apps for ``bus verify``'s tests: one whose state-based handler reads the
system clock, one that reads Python's random module, one well-behaved that declares no
examples (its messages are generated), and one with a model nothing can generate."""

from __future__ import annotations

import random
import time

from pydantic import BaseModel, ConfigDict, Field

from shared.bus import BusApp, Command, HandlerContext


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


clock_app = _app(stamp_with_clock)
random_app = _app(stamp_with_random)
counting_app = _app(count)
examples = [Stamp(ticket="t1")]
"""The examples the apps of this module declare (``counting_app`` is run without them)."""


class Connection:
    """Something no strategy can build: nothing says what its argument is."""

    def __init__(self, handle):  # type: ignore[no-untyped-def]
        self.handle = handle


class Connect(Command):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)
    partition_by = "name"
    name: str = Field(min_length=1)
    connection: Connection


def connect(ctx: HandlerContext[Ticket], message: Connect) -> None:
    ctx.state.count += 1


opaque_app = BusApp()
opaque_app.endpoint("links", Ticket).handles(Connect)(connect)
