"""Entity-outbox and processed-messages modes: the outbox entry is cleared after dispatch,
size limits are refused clearly before Azure's, and retention removes old dedup data."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.modes.entity_outbox import (
    OutboxEntry,
    StateEntity,
    expire_entity_outboxes,
)
from shared.bus.modes.errors import EntityOutboxFull
from shared.bus.modes.processed_table import PROCESSED_PREFIX, expire_processed
from shared.bus.state.rows import TableRows
from shared.clock import ManualClock, to_datetime
from shared.errors import TooLarge
from shared.stores.memory import MemoryStorageAccount
from shared.stores.spread import spread
from shared.stores.table import normalise_entity
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name


class Add(Command):
    partition_by = "key"
    key: str
    pad: str = ""


class Notes(BaseModel):
    text: str = ""
    count: int = 0


def notes_app(name: str, mode: str) -> BusApp:
    app = BusApp()
    endpoint = app.endpoint(name, state=Notes, mode=mode)  # type: ignore[arg-type]

    @endpoint.handles(Add)
    def add(ctx: HandlerContext[Notes], cmd: Add) -> None:
        ctx.state.count += 1
        ctx.state.text += cmd.pad
        if not cmd.pad:
            ctx.send(Add(key=cmd.key + "x", pad="."), to=name)

    return app


def memory_backend() -> Backend:
    clock = ManualClock()
    return Backend("memory", MemoryStorageAccount(clock=clock), clock)


async def test_the_outbox_entry_is_cleared_once_its_messages_are_dispatched() -> None:
    name = f"notes{unique_name('')[:8]}"
    harness = await Harness.create(memory_backend(), notes_app(name, "entity_outbox"))
    await harness.setup_bus.client().send(Add(key="k"), to=name, idempotency_key="1")
    await harness.run_until_quiet()

    stored = StateEntity.from_entity(await harness.raw.table(name).get("k", "state"))
    [entry] = stored.entries.values()
    assert entry.out is None  # dispatched, then cleared
    assert len(entry.sent) == 1  # the committed attempt id stays for the cleanup
    assert await harness.tokens_in_flight() == []


def test_an_outbox_map_that_would_break_a_table_limit_is_refused_before_azure_would() -> None:
    base = StateEntity("p", "Notes", Notes().model_dump_json())
    entry = OutboxEntry(to_datetime(0), ("a" * 36,) * 3, None)
    full = base
    for i in range(6000):
        full = full.with_entry(f"{i:036d}", entry)
    with pytest.raises(EntityOutboxFull, match=r"over BusConfig.entity_max_bytes=983040"):
        full.to_entity(960 * 1024)
    # Just under the limit the entity is one Table Storage accepts (1 MiB, 64 KiB a property).
    fits = base
    for i in range(2000):
        fits = fits.with_entry(f"{i:036d}", entry)
    normalise_entity(fits.to_entity(960 * 1024))
    with pytest.raises(TooLarge):  # what the limit protects from
        normalise_entity(full.to_entity(1 << 30))
    # A business state longer than one property is spread across parts by the rows.
    big_state = StateEntity("p", "Notes", Notes(text="x" * 40000).model_dump_json())
    normalise_entity(spread(big_state.to_entity(960 * 1024)))
    # A state that alone would not fit: parked at once, as no expiry of the map makes room.
    huge_state = StateEntity("p", "Notes", Notes(text="x" * 500_000).model_dump_json())
    with pytest.raises(TooLarge, match="the business state is 1,000,"):
        huge_state.to_entity(960 * 1024)


async def test_a_full_entity_refuses_the_message_and_keeps_its_token() -> None:
    name = f"notes{unique_name('')[:8]}"
    harness = await Harness.create(
        memory_backend(), notes_app(name, "entity_outbox"), entity_max_bytes=4096
    )
    await harness.setup_bus.client().send(
        Add(key="k", pad="y" * 3000), to=name, idempotency_key="1"
    )
    for worker in harness.workers.values():
        worker.settings = type(worker.settings)(max_dequeue_count=2, lease_seconds=30)

    await harness.run_until_quiet()

    assert len(await harness.tokens()) == 1  # parked for a replay, nothing lost
    assert await harness.raw.queue(f"{name}-poison").approximate_count() == 1


@pytest.mark.parametrize("mode", ["entity_outbox", "processed_messages"])
async def test_retention_removes_dedup_data_past_the_window_only(mode: str) -> None:
    backend = memory_backend()
    assert backend.clock is not None
    name = f"notes{unique_name('')[:8]}"
    harness = await Harness.create(backend, notes_app(name, mode))
    await harness.setup_bus.client().send(Add(key="k", pad="."), to=name, idempotency_key="1")
    await harness.run_until_quiet()
    backend.clock.advance(3 * 3600)
    await harness.setup_bus.client().send(Add(key="k", pad="."), to=name, idempotency_key="2")
    await harness.run_until_quiet()
    table = harness.raw.table(name)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    horizon = to_datetime(backend.clock()) - timedelta(hours=1)

    expire = expire_entity_outboxes if mode == "entity_outbox" else expire_processed
    removed, continuation = await expire(
        TableRows(table), tokens=tokens, older_than=horizon, page_size=10
    )

    assert (removed, continuation) == (1, None)
    if mode == "entity_outbox":
        stored = StateEntity.from_entity(await table.get("k", "state"))
        assert len(stored.entries) == 1
    else:
        assert len([e async for e in table.query_all(row_key_prefix=PROCESSED_PREFIX)]) == 1
    assert Notes.model_validate_json(str((await table.get("k", "state"))["data"])).count == 2
