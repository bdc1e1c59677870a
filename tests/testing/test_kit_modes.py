"""The kit runs an endpoint of every mode and store as the product does: a tally of a user's
own, in each mode, on tables and on the in-memory model of PostgreSQL, counts a message
delivered twice, and its copies delivered at once, once."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.app import MODES, STORES, Mode, Store
from shared.testing import BusKit


class Count(Command):
    partition_by = "tally"
    tally: str


class Counted(Event):
    partition_by = "tally"
    tally: str


class Invoice(Command):
    partition_by = "tally"
    tally: str


class Tally(BaseModel):
    seen: int = 0


def tally_app(mode: Mode, store: Store) -> BusApp:
    app = BusApp()
    app.external_endpoint("billing", accepts=[Invoice])
    tallies = app.endpoint("tallies", Tally, mode=mode, store=store)
    echoes = app.endpoint("echoes", Tally)

    @tallies.handles(Count)
    def count(ctx: HandlerContext[Tally], cmd: Count) -> None:
        ctx.state.seen += 1
        ctx.publish(Counted(tally=cmd.tally))
        ctx.send(Invoice(tally=cmd.tally), to="billing")

    @echoes.handles(Counted)
    def echo(ctx: HandlerContext[Tally], event: Counted) -> None:
        ctx.state.seen += 1

    return app


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("mode", MODES)
async def test_every_mode_and_store_applies_copies_once(mode: Mode, store: Store) -> None:
    kit = BusKit(tally_app(mode, store))
    await kit.send(Count(tally="t1"), to="tallies")
    await kit.duplicate("tallies", copies=3)
    await kit.send(Count(tally="t2"), to="tallies")
    await kit.deliver_concurrently("tallies", copies=2)
    await kit.run_until_quiet()
    for tally in ("t1", "t2"):
        assert await kit.state("tallies", tally, Tally) == Tally(seen=1)
        assert await kit.state("echoes", tally, Tally) == Tally(seen=1)
    # The invoices wait in the queue of another app's endpoint; the kit reads them there.
    invoices = await kit.sent(Invoice, to="billing")
    assert sorted(i.tally for i in invoices) == ["t1", "t2"]


async def test_a_published_event_reaches_its_subscribers() -> None:
    kit = BusKit(tally_app("token", "table"))
    await kit.publish(Counted(tally="t1"))
    await kit.run_until_quiet()
    assert await kit.state("echoes", "t1", Tally) == Tally(seen=1)
    assert await kit.messages() == []  # the test's own publish is input, not output
