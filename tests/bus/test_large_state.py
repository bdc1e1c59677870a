"""An endpoint state larger than one Table Storage property (64 KiB, 32,768 ASCII
characters), in every mode and store: kept whole, each message applied once, and a state
past what the store holds refused (``shared.stores.spread`` lays the text out in parts)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.app import Mode
from shared.bus.records import AuditRecord, OutboxRecord
from shared.bus.state.base import EndpointState, StateWrite
from shared.bus.state.rows import TableRows
from shared.errors import TooLarge
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import (
    WINDOW_MODES,
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

NOTE_CHARS = 1_000
NOTES = 45
"""45,000 characters and more of notes: beyond one property, well within an entity."""


class AddNote(Command):
    partition_by = "book"
    book: str
    note: str


class Notebook(BaseModel):
    notes: list[str] = []
    applied: list[str] = []


def notebook_app(endpoint: str, mode: Mode) -> BusApp:
    app = BusApp()
    notebook = app.endpoint(endpoint, state=Notebook, mode=mode)

    @notebook.handles(AddNote)
    def add(ctx: HandlerContext[Notebook], cmd: AddNote) -> None:
        ctx.state.notes.append(cmd.note)
        ctx.state.applied.append(ctx.message_id)

    return app


REAL_SQL_WINDOW_MODES = {f"postgres-{mode}" for mode in WINDOW_MODES}
GROWING_STATE_BACKENDS = [p for p in backend_modes() if p.id not in REAL_SQL_WINDOW_MODES]
"""Every mode on tables (in memory and on Azurite, where the state is laid out in parts) and
in the model of PostgreSQL; on a real server token mode only. The bus applies no size rule to
PostgreSQL rows (``normalise_entity`` leaves sizes to Table Storage), and the endpoint-rows
contract commits and reads back a 300,000-character state on the real server."""


@pytest.mark.parametrize("backend", GROWING_STATE_BACKENDS, indirect=True)
async def test_a_state_past_one_property_grows_message_by_message_exactly_once(
    backend: Backend, mode: Mode
) -> None:
    endpoint = unique_name("notes")
    harness = await Harness.create(backend, notebook_app(endpoint, mode))
    client = harness.setup_bus.client()
    sent: list[str] = []
    for n in range(NOTES):
        note = f"{n:04d}" + "n" * (NOTE_CHARS - 4)
        command = AddNote(book="b1", note=note)
        receipt = await client.send(command, to=endpoint, idempotency_key=f"k{n}")
        sent += receipt.message_ids
    # Every signal twice: a duplicate of a message whose state is spread finds it applied.
    for message in await harness.raw.queue(endpoint).peek(32):
        await harness.raw.queue(endpoint).send(message.content)

    await harness.run_until_quiet()

    book = await harness.applied_state(endpoint, "b1", Notebook)
    assert sorted(book.applied) == sorted(sent)
    assert len(book.applied) == len(set(book.applied))
    assert sorted(book.notes) == sorted(f"{n:04d}" + "n" * (NOTE_CHARS - 4) for n in range(NOTES))
    assert len(book.model_dump_json()) > 40_000
    depths = await harness.queue_depths()
    assert {queue: n for queue, n in depths.items() if n} == {}


LARGEST_TOKEN_STATE = 524_140
"""The figure docs/modes.md gives ("How large a state may be"): the longest ASCII state JSON a
token-mode commit writes on Table Storage's rules, for a partition key of two characters and
a state type of seven (the state row holds both: each character more is one less)."""


@pytest.mark.parametrize(("extra", "fits"), [(0, True), (1, False)])
async def test_the_largest_token_state_docs_give_is_the_real_boundary(
    extra: int, fits: bool
) -> None:
    table = MemoryStorageAccount().table("endpoint1")
    await table.create_if_missing()
    store = EndpointState(TableRows(table))
    started = datetime(2026, 3, 1, tzinfo=UTC)
    record = OutboxRecord("p1", "m1", claim="c1", incoming_token="tok/1", started_at=started)
    record = replace(record, etag=await store.insert_outbox(record))
    audit = AuditRecord(
        partition_key="p1",
        endpoint=table.name,
        message_id="m1",
        message_type="Pay",
        source="ingress",
        correlation_id="c",
        causation_id=None,
        sent_at=started,
        processed_at=started,
        mode="token",
    )
    data = json.dumps({"s": "x" * (LARGEST_TOKEN_STATE + extra - len('{"s": ""}'))})
    state = StateWrite("p1", "Counter", data, expected=None)

    async def commit() -> None:
        async with store.begin() as transaction:
            await transaction.commit(state, record.committing([], [], started), audit)

    if fits:
        await commit()
    else:
        with pytest.raises(TooLarge):
            await commit()
