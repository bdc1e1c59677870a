"""Apps with one endpoint in each mode, all in Table Storage (``table_app``) or all in
PostgreSQL (``postgres_app``): what ``bus state`` and ``bus poison show`` are tried on."""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.app import Mode, Store

ENDPOINTS: dict[Mode, str] = {
    "token": "tally",
    "entity_outbox": "tallyoutbox",
    "processed_messages": "tallyprocessed",
    "state_based": "tallystates",
}


class Tally(BaseModel):
    count: int = 0


class Count(Command):
    partition_by = "key"
    key: str
    note: str = ""
    fail: bool = False


def modes_app(store: Store) -> BusApp:
    app = BusApp()
    for mode in get_args(Mode):
        endpoint = app.endpoint(ENDPOINTS[mode], state=Tally, mode=mode, store=store)
        endpoint.handles(Count)(count)
    return app


def count(ctx: HandlerContext[Tally], cmd: Count) -> None:
    if cmd.fail:
        raise RuntimeError(f"refused {cmd.key}")
    ctx.state.count += 1


table_app = modes_app("table")
postgres_app = modes_app("postgres")
