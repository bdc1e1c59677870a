"""An endpoint's state during a rolling deploy: messages of one partition are processed in
turn by instances of version 2 and version 1 of the app, each reading the state the other
wrote. Version 2's state model has a field version 1's lacks. A version 1 state model with
``extra="allow"`` (docs/evolving-messages.md, "State models") keeps that field when it
writes the state back; one with pydantic's default drops it, and what version 2 stored is
lost. In memory: two buses of the two versions on one account, as two instances."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict

from shared.bus import Bus, BusApp, Command, HandlerContext
from shared.provisioning import provision
from shared.resources import resources_for
from shared.stores.memory import MemoryStorageAccount


class Tick(Command):
    partition_by = "counter"
    counter: str
    note: str


class Tally(BaseModel):
    """Version 1's state, with pydantic's default for fields it does not know: ignore them."""

    ticks: int = 0


class TallyKeepingUnknownFields(Tally):
    """Version 1's state as the docs advise."""

    model_config = ConfigDict(extra="allow")


class TallyWithNotes(BaseModel):
    """Version 2's state: version 1's and the notes."""

    model_config = ConfigDict(extra="allow")
    ticks: int = 0
    notes: list[str] = []


def version_1(state: type[Tally]) -> BusApp:
    app = BusApp()

    @app.endpoint("tally", state=state).handles(Tick)
    def tick(ctx: HandlerContext[Tally], message: Tick) -> None:
        ctx.state.ticks += 1

    return app


def version_2() -> BusApp:
    app = BusApp()

    @app.endpoint("tally", state=TallyWithNotes).handles(Tick)
    def tick(ctx: HandlerContext[TallyWithNotes], message: Tick) -> None:
        ctx.state.ticks += 1
        ctx.state.notes.append(message.note)

    return app


async def processed_by(bus: Bus, note: str) -> None:
    """A Tick sent and processed by ``bus``'s instance."""
    await bus.client("cli").send(Tick(counter="c", note=note), to="tally", idempotency_key=note)
    [signal] = await bus.account.queue("tally").receive(max_messages=1, visibility_timeout=30)
    await bus.receive("tally", signal.content, signal.dequeue_count)
    await bus.account.queue("tally").delete(signal.id, signal.pop_receipt)


@pytest.mark.parametrize(
    ("old_state", "notes"),
    [(TallyKeepingUnknownFields, ["v2-a", "v2-b"]), (Tally, ["v2-b"])],
)
async def test_version_1_writes_back_what_version_2_stored_only_if_its_model_allows_it(
    old_state: type[Tally], notes: list[str]
) -> None:
    account = MemoryStorageAccount()
    new, old = Bus(version_2(), account), Bus(version_1(old_state), account)
    await provision(account, resources_for(new.app.endpoints))

    await processed_by(new, "v2-a")
    await processed_by(old, "v1")
    await processed_by(new, "v2-b")

    entity = await account.table("tally").get("c", "state")
    assert json.loads(str(entity["data"])) == {"ticks": 3, "notes": notes}
