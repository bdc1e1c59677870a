"""State-based mode: duplicates are replayed on the restored version, a handler that is not
deterministic is reported, and the stream is truncated by retention."""

from __future__ import annotations

import itertools
import logging
import time
from datetime import timedelta

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext, Outcome
from shared.bus.modes.state_based import (
    INDEX_PREFIX,
    VERSION_PREFIX,
    truncate_state_streams,
    version_row,
)
from shared.bus.state.rows import TableRows
from shared.clock import ManualClock, to_datetime
from shared.stores.instrumented import Fault, fault_at
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import encode_continuation
from tests.bus.harness import (
    Harness,
    mode_rows_of,
    per_mode_backend,  # noqa: F401  (fixture "backend")
)
from tests.conftest import Backend, unique_name


class Fire(Command):
    partition_by = "game"
    game: str


class Shot(Command):
    partition_by = "game"
    game: str
    shot_id: str
    roll: float
    at: str


class Range(BaseModel):
    shots: int = 0
    target: float = 0.0


class Sink(BaseModel):
    received: list[str] = []


def shooting_app(suffix: str, deterministic: bool = True) -> tuple[BusApp, list[int]]:
    runs: list[int] = []
    counter = itertools.count()
    app = BusApp()
    shooter = app.endpoint(f"range{suffix}", state=Range, mode="state_based")
    sink = app.endpoint(f"sink{suffix}", state=Sink)

    @shooter.handles(Fire)
    def fire(ctx: HandlerContext[Range], cmd: Fire) -> None:
        runs.append(1)
        ctx.state.shots += 1
        ctx.state.target = ctx.random()
        shot_id = ctx.new_id() if deterministic else f"shot-{next(counter)}"
        ctx.send(
            Shot(game=cmd.game, shot_id=shot_id, roll=ctx.random(), at=ctx.now().isoformat()),
            to=sink.name,
        )

    @sink.handles(Shot)
    def record(ctx: HandlerContext[Sink], shot: Shot) -> None:
        ctx.state.received.append(shot.shot_id)

    return app, runs


def memory_backend() -> Backend:
    clock = ManualClock()
    return Backend("memory", MemoryStorageAccount(clock=clock), clock)


async def run_with_crash_after_commit(deterministic: bool) -> tuple[Harness, list[int], str]:
    suffix = unique_name("")[:8]
    app, runs = shooting_app(suffix, deterministic)
    harness = await Harness.create(memory_backend(), app)
    await harness.setup_bus.client().send(Fire(game="g"), to=f"range{suffix}", idempotency_key="k")
    # Operations at the shooter: blob.read, table.query, blob.create, table.transact, ...
    harness.instrumentation.plan = fault_at(3, Fault.CRASH_AFTER)
    await harness.run_until_quiet()
    assert harness.instrumentation.injected[0][0].kind == "table.transact"
    return harness, runs, suffix


async def test_a_duplicate_is_replayed_on_the_version_before_it_with_identical_outputs() -> None:
    harness, runs, suffix = await run_with_crash_after_commit(deterministic=True)

    assert len(runs) == 2  # the first run committed, then crashed; the copy replayed
    assert harness.outcomes[Outcome.RESUMED] == 1
    assert harness.outcomes[Outcome.NONDETERMINISTIC] == 0
    table = harness.raw.table(f"range{suffix}")
    versions = [e async for e in table.query_all(row_key_prefix=VERSION_PREFIX)]
    assert len(versions) == 1
    state = await table.get("g", "state")
    assert Range.model_validate_json(str(state["data"])).shots == 1
    sink = [e async for e in harness.raw.table(f"sink{suffix}").query_all()]
    [received] = [Sink.model_validate_json(str(e["data"])) for e in sink if e.row_key == "state"]
    assert len(received.received) == 1
    assert await harness.tokens_in_flight() == []


async def test_a_handler_that_is_not_deterministic_is_reported_and_not_applied_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        harness, runs, suffix = await run_with_crash_after_commit(deterministic=False)

    assert len(runs) == 2
    assert harness.outcomes[Outcome.NONDETERMINISTIC] == 1
    assert "handler is not deterministic" in caplog.text
    assert "output 0: committed Shot" in caplog.text
    state = await harness.raw.table(f"range{suffix}").get("g", "state")
    assert Range.model_validate_json(str(state["data"])).shots == 1
    rows = [e async for e in harness.raw.table(f"sink{suffix}").query_all()]
    [sink] = [Sink.model_validate_json(str(e["data"])) for e in rows if e.row_key == "state"]
    assert sink.received == ["shot-0"]  # the committed output, once
    assert await harness.tokens_in_flight() == []


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(("memory", "state_based"), id="memory-table"),
        pytest.param(("azurite", "state_based"), id="azurite-table", marks=pytest.mark.azurite),
        pytest.param(("memory-sql", "state_based"), id="memory-sql"),
        pytest.param(
            ("postgres", "state_based"),
            id="postgres",
            marks=[pytest.mark.azurite, pytest.mark.postgres],
        ),
    ],
    indirect=True,
)
async def test_truncation_keeps_the_latest_version_and_what_duplicates_in_the_window_need(
    backend: Backend,
) -> None:
    """In every store, over pages of two rows: a page boundary falls between versions of
    one stream, so the version waiting for its successor crosses from one call to the next
    in the continuation."""
    clock = backend.clock or ManualClock(time.time())
    suffix = unique_name("")[:8]
    app, _ = shooting_app(suffix)
    harness = await Harness.create(backend, app, clock=clock)
    shooter = f"range{suffix}"
    for i in range(5):  # versions 1..5, one hour apart
        await harness.setup_bus.client().send(Fire(game="g"), to=shooter, idempotency_key=f"{i}")
        await harness.run_until_quiet()
        clock.advance(3600)
    rows = harness.rows(shooter).rows()
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    # The window starts between versions 3 and 4 (committed at +2 h and +3 h).
    horizon = to_datetime(clock()) - timedelta(hours=2, minutes=30)

    removed, continuation, calls = 0, None, 0
    while True:
        count, continuation = await truncate_state_streams(
            rows, tokens=tokens, older_than=horizon, page_size=2, continuation=continuation
        )
        removed, calls = removed + count, calls + 1
        if continuation is None:
            break

    kept = [e async for e in mode_rows_of(rows)]
    versions = [
        int(e.row_key[len(VERSION_PREFIX) :]) for e in kept if e.row_key.startswith(VERSION_PREFIX)
    ]
    indexed = [e for e in kept if e.row_key.startswith(INDEX_PREFIX)]
    # Version 3 stays: the duplicate of the message that made version 4 replays on it.
    assert versions == [3, 4, 5]
    assert removed == 2
    assert calls > 1
    assert sorted(int(str(e["version"])) for e in indexed) == [3, 4, 5]


async def test_truncation_resumes_from_a_checkpoint_written_before_the_upgrade() -> None:
    """A cleanup checkpoint may hold a page continuation in the table's own format, as the
    truncation returned it before it carried the waiting version: it goes on from there."""
    backend = memory_backend()
    assert backend.clock is not None
    suffix = unique_name("")[:8]
    app, _ = shooting_app(suffix)
    harness = await Harness.create(backend, app)
    shooter = f"range{suffix}"
    for i in range(3):
        await harness.setup_bus.client().send(Fire(game="g"), to=shooter, idempotency_key=f"{i}")
        await harness.run_until_quiet()
        backend.clock.advance(3600)
    table = harness.raw.table(shooter)
    tokens = harness.raw.blob_container(harness.config.tokens_container)

    removed, continuation = await truncate_state_streams(
        TableRows(table),
        tokens=tokens,
        older_than=to_datetime(backend.clock()),
        continuation=encode_continuation("g", version_row(2)),
    )

    versions = [e.row_key async for e in table.query_all(row_key_prefix=VERSION_PREFIX)]
    assert (removed, continuation) == (1, None)
    assert versions == [version_row(1), version_row(3)]  # version 1 was before the checkpoint
