"""The cleanup's retirement of at-most-once markers (``shared.cleanup.markers``): a marker
stays while any copy of its request may still reach the performer (its O(m) is there: the
request is in flight or parked), and goes one grace period after a pass first found its
request gone, never sooner; a parked request keeps its marker however long it waits, so its
replay still does not call."""

from __future__ import annotations

from collections import Counter

from shared.bus.effects import PERFORMER_ENDPOINT
from shared.bus.poison import replay
from shared.bus.state.rows import TableRows
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import standard_tasks
from shared.effects.markers import EffectMarkers
from shared.stores.instrumented import Fault, Operation
from tests.bus.harness import Harness
from tests.conftest import unique_name
from tests.effects.test_at_most_once import Parcel, booked, courier, ignoring_keys

GRACE = 300.0


async def clean(harness: Harness, *, after: float) -> CleanupReport:
    """One full pass ``after`` seconds from now (the stores' clock moved first)."""
    clock = harness.backend.clock
    assert clock is not None  # in-memory stores: time is moved, not waited for
    clock.advance(after)
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=CleanupSettings(grace_seconds=GRACE, checkpoint_table=unique_name("cleanup")),
    )


def counted(report: CleanupReport, kind: str) -> Counter[str]:
    [task] = [t for t in report.tasks if t.task == "effect_markers"]
    return getattr(task, kind)  # type: ignore[no-any-return]


def markers(harness: Harness) -> EffectMarkers:
    return EffectMarkers(TableRows(harness.raw.table(PERFORMER_ENDPOINT)))


def test_the_task_runs_for_an_app_with_a_performer_only() -> None:
    assert "effect_markers" in [t.id for t in standard_tasks(["orders", PERFORMER_ENDPOINT])]
    assert "effect_markers" not in [t.id for t in standard_tasks(["orders"])]


async def test_a_performed_effects_marker_goes_a_grace_period_after_its_request_was_seen_gone() -> (
    None
):
    harness = await courier(ignoring_keys())
    [key] = (await booked(harness)).requested
    assert await markers(harness).marked(key)

    young = await clean(harness, after=1.0)
    assert counted(young, "kept")["request_pending"] == 1  # its O(m) waits for the outbox task

    # The outbox task retires O(m) once old; the marker is stamped by that pass or the next
    # (the tasks run side by side).
    first = await clean(harness, after=GRACE)
    second = await clean(harness, after=1.0)
    stamps = [counted(r, "changed")["effect_markers_stamped"] for r in (first, second)]
    assert sum(stamps) == 1
    assert await markers(harness).marked(key)

    waiting = await clean(harness, after=GRACE - 10.0)
    assert counted(waiting, "kept")["retiring"] == 1
    assert await markers(harness).marked(key)

    retired = await clean(harness, after=10.0)
    assert counted(retired, "removed")["effect_markers"] == 1
    assert not await markers(harness).marked(key)


async def test_a_parked_requests_marker_stays_and_its_late_replay_does_not_call() -> None:
    provider = ignoring_keys()
    harness = await courier(provider)

    def commit_fails(operation: Operation) -> Fault | None:
        commit = operation.kind == "table.transact" and operation.target == PERFORMER_ENDPOINT
        return Fault.ERROR_BEFORE if commit else None

    harness.instrumentation.plan = commit_fails
    [key] = (await booked(harness)).requested
    harness.instrumentation.plan = lambda operation: None
    for _ in range(3):
        report = await clean(harness, after=GRACE * 10)
        assert counted(report, "kept")["request_pending"] == 1
    assert await markers(harness).marked(key)

    assert await replay(harness.raw, PERFORMER_ENDPOINT) == 1
    await harness.run_until_quiet()

    parcel = await harness.applied_state("parcels", "p1", Parcel)
    assert parcel.answers == [(key, "uncertain", 0)]
    assert provider.calls == 1
