"""A 16 MiB body (``BUS_MAX_PAYLOAD_BYTES``' default) received and sent in every endpoint mode
and store: every mode keeps outgoing bodies in their tokens and lists only signals in its
record (O(m), the processed row, the state version, the entity's outbox map), so none has a
body limit of its own. In memory for every mode, with the PostgreSQL model and a real server
for the SQL stores; on Azurite under ``-m slow`` (measured by hand for docs/modes.md)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from shared.app_settings import MAX_PAYLOAD
from shared.bus import BusApp, Command, HandlerContext
from shared.bus.app import Mode
from tests.bus.harness import (
    MODES,
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize(
    "backend", backend_modes(azurite=(), slow_azurite=MODES), indirect=True
)

FRAME = len(b'{"doc":"d1","content":""}')
CONTENT = MAX_PAYLOAD.default - FRAME
"""Characters of a body exactly at the limit."""


class Store(Command):
    partition_by = "doc"
    doc: str
    content: str


class Archive(Command):
    partition_by = "doc"
    doc: str
    content: str


class Sizes(BaseModel):
    received: list[int] = []


def documents_app(mode: Mode, documents: str, archive: str) -> BusApp:
    app = BusApp()
    receiver = app.endpoint(documents, state=Sizes, mode=mode)
    keeper = app.endpoint(archive, state=Sizes)

    @receiver.handles(Store)
    def store(ctx: HandlerContext[Sizes], doc: Store) -> None:
        ctx.state.received.append(len(doc.content))
        ctx.send(Archive(doc=doc.doc, content=doc.content), to=archive)

    @keeper.handles(Archive)
    def keep(ctx: HandlerContext[Sizes], doc: Archive) -> None:
        ctx.state.received.append(len(doc.content))

    return app


async def test_a_body_at_the_limit_is_received_and_sent_once_in_every_mode(
    backend: Backend, mode: Mode
) -> None:
    documents, archive = unique_name("docs"), unique_name("archive")
    harness = await Harness.create(backend, documents_app(mode, documents, archive))
    command = Store(doc="d1", content="c" * CONTENT)
    assert len(command.model_dump_json()) == MAX_PAYLOAD.default

    await harness.setup_bus.client().send(command, to=documents, idempotency_key="k")
    # The queue carries a signal naming the token, not the body nor a copy of it.
    [signal] = await harness.raw.queue(documents).peek()
    assert len(signal.content) < 1024
    await harness.run_until_quiet()

    assert (await harness.applied_state(documents, "d1", Sizes)).received == [CONTENT]
    assert (await harness.applied_state(archive, "d1", Sizes)).received == [CONTENT]
    assert await harness.tokens_in_flight() == []
