"""A user's app with a message model nothing can generate, and no examples declared."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from shared.bus import BusApp, Command, HandlerContext
from tests.verify.apps import Ticket


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


app = BusApp()
app.endpoint("links", Ticket).handles(Connect)(connect)
