"""What a partition may hold on a document store (issue 47, requirement 4), through the
pipeline: a partition's rows live in one document (``shared.bus.state.document_rows``), so
a message whose own rows could never fit in one is parked on its first try with a reason
naming the limit, nothing written (as Table Storage's 1 MiB entity is,
``tests/bus/test_permanent_failures.py``); a partition filled by O(m) and audit rows the
cleanup has not yet retired refuses the next message for now (``PartitionFull``), which is
retried, not parked, and processed once the cleanup has retired them.

The limits are made small through configuration: a blob document holds
``BusConfig.max_payload_bytes``, a Cosmos DB item ``max_bytes`` of its database (the model's
and the local server's alike: our own check refuses before anything is sent, as it does
before the service's 2 MB refusal)."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.stores.cosmos.database import CosmosDatabase
from shared.stores.memory.documents import MemoryDocumentDatabase
from tests.bus.harness import (
    MODES,
    DocumentBackend,
    Harness,
    document_backends,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
    rows_store,
)
from tests.bus.test_retries import deliver_visible
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize(
    "backend", document_backends(MODES, real=["token"]), indirect=True
)

LIMIT = 12_000
"""Bytes a partition's document holds here: room for a few messages' O(m) and audit rows."""
NOTE = "n" * 5_000
"""A body well under the limit, kept three times in the state: 15 KB, over it."""


class Keep(Command):
    partition_by = "key"
    key: str
    note: str


class Tick(Command):
    partition_by = "key"
    key: str


class Notes(BaseModel):
    notes: list[str] = []
    ticks: int = 0


def notes_app(name: str, mode: Mode, runs: Counter[str]) -> BusApp:
    app = BusApp()
    endpoint = app.endpoint(name, state=Notes, mode=mode)

    @endpoint.handles(Keep)
    def keep(ctx: HandlerContext[Notes], cmd: Keep) -> None:
        runs["keep"] += 1
        ctx.state.notes += [cmd.note] * 3

    @endpoint.handles(Tick)
    def tick(ctx: HandlerContext[Notes], cmd: Tick) -> None:
        runs["tick"] += 1
        ctx.state.ticks += 1

    return app


async def limited(backend: Backend, mode: Mode) -> tuple[Harness, str, Counter[str]]:
    """A harness whose endpoint's documents hold ``LIMIT`` bytes, in the store's own way."""
    assert isinstance(backend, DocumentBackend)
    if isinstance(backend.cosmos, MemoryDocumentDatabase | CosmosDatabase):
        backend.cosmos.max_bytes = LIMIT  # read as each endpoint's documents are opened
    runs: Counter[str] = Counter()
    name = f"notes{unique_name('')[:8]}"
    config: dict[str, object] = {"max_payload_bytes": LIMIT} if backend.store == "blob" else {}
    harness = await Harness.create(backend, notes_app(name, mode, runs), **config)
    return harness, name, runs


async def send(harness: Harness, name: str, command: Command, key: str) -> None:
    await harness.setup_bus.client().send(command, to=name, idempotency_key=key)


async def test_a_message_whose_rows_cannot_fit_a_document_parks_at_once(
    backend: Backend, mode: Mode
) -> None:
    # Given a 5 KB note the handler keeps three times in its partition's state
    harness, name, runs = await limited(backend, mode)
    await send(harness, name, Keep(key="k", note=NOTE), "keep")

    # When it is delivered
    outcomes = await deliver_visible(harness, name)

    # Then it is parked on its first try, the reason naming the limit and the store
    assert outcomes == Counter({Outcome.POISONED: 1})
    assert runs["keep"] == 1
    [parked] = await harness.poison_messages(name)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    assert reason["error_type"] == "LimitExceeded"
    text = str(reason["reason"])
    assert f"a {rows_store(backend, mode)} document holds {LIMIT:,}" in text, text
    assert "(not retried)" in text
    # and nothing of it written: no state, no audit row; its token waits for a replay
    assert (await harness.applied_state(name, "k", Notes)).notes == []
    assert await harness.audit_ids(name) == []
    assert len(await harness.tokens()) == 1


async def test_a_full_partition_is_retried_until_the_cleanup_makes_room(
    backend: Backend, mode: Mode
) -> None:
    # Given a partition that took ticks until its document could take no more
    harness, name, _ = await limited(backend, mode)
    processed = 0
    for n in range(40):
        await send(harness, name, Tick(key="k"), f"tick-{n}")
        if not await delivered_once(harness, name):
            break
        processed += 1
    else:
        pytest.fail("the partition never filled")
    assert processed >= 2  # filled by the rows of earlier messages, not this one's own

    # Then the message that found it full was released for a retry, not parked, and
    # nothing of it written; and so again on its next try
    assert not await delivered_once(harness, name)
    assert await harness.queue_depths() == {name: 1, f"{name}-poison": 0}
    assert (await harness.applied_state(name, "k", Notes)).ticks == processed
    assert len(await harness.audit_ids(name)) == processed

    # When the cleanup retires the audit rows (and in token mode the O(m) records)
    await cleanup_pass(harness)

    # Then the message is processed, once
    await harness.run_until_quiet()
    assert (await harness.applied_state(name, "k", Notes)).ticks == processed + 1
    assert len(await harness.audit_ids(name)) == 1  # the earlier ones retired
    assert await harness.poison_messages(name) == []
    assert await harness.queue_depths() == {name: 0, f"{name}-poison": 0}


async def delivered_once(harness: Harness, name: str) -> bool:
    """One try of the one message in ``name``'s queue: whether it was processed. A failed
    try leaves it in the queue (no outcome: the exception went to the queue worker)."""
    before = Counter(harness.outcomes)
    [message] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
    await harness.deliver(name, message)
    outcomes = harness.outcomes - before
    assert outcomes in (Counter(), Counter({Outcome.PROCESSED: 1})), outcomes
    return bool(outcomes)


async def cleanup_pass(harness: Harness) -> None:
    """One cleanup run that keeps no audit row and waits for nothing."""
    settings = CleanupSettings(
        grace_seconds=0,
        audit_retention_seconds=0,
        checkpoint_table=unique_name("cleanup"),
    )
    await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=settings,
    )
