"""Sagas in the simulator (``small-saga``, ``lab.sim.sagas``): an instance starts, takes a
reply, completes and meets a second starting message, beside a message for an instance
nobody starts, under copies, a network duplicate, a late redelivery, a cleanup pass and
faults at every storage operation; and the known-bad sagas are caught."""

from __future__ import annotations

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.explore import CONFIGS, exhaustive, replay
from lab.sim.invariants import (
    NO_PROCESSING_AFTER_COMPLETION,
    NO_RESURRECTED_INSTANCE,
    NO_UNSTARTED_INSTANCE,
    NOT_FOUND,
    PROCESSED,
    Instance,
)
from lab.sim.variants import (
    SAGA_COMPLETION_DELETES,
    SAGA_MARKER_IGNORED,
    SAGA_NOT_FOUND_WRITES,
    VARIANTS,
    Variant,
)
from lab.sim.world import RunResult

SMALL = CONFIGS["small-saga"]
POSTGRES = CONFIGS["small-saga-postgres"]
BOUND = 150
"""Schedules per search in ``make test``: a few seconds each (the full phases are in
``make simulate``)."""


def test_the_default_simulation_explores_sagas_on_both_stores() -> None:
    planned = [{(name, d, f) for name, d, f in plan} for plan in DEFAULT_PLAN]

    for half in planned:
        assert len(half & {("small-saga", 1, 0), ("small-saga", 0, 1)}) == 1
        assert len(half & {("small-saga-postgres", 1, 0), ("small-saga-postgres", 0, 1)}) == 1
    assert (SMALL.copies, SMALL.sweeps, SMALL.duplicates, SMALL.waits) == (2, 1, 1, 1)
    assert POSTGRES.saga
    assert POSTGRES.store == "postgres"
    saga_variants = {name for name in VARIANTS if name.startswith("saga-")}
    assert saga_variants == {
        "saga-completion-deletes",
        "saga-marker-ignored",
        "saga-not-found-writes",
    }


async def test_the_default_schedule_completes_the_instance_and_refuses_the_rest() -> None:
    """The instance ends as its completed marker, started by m0; the second start and the
    payment for an instance nobody started are acknowledged as saga_not_found, once each."""
    result = await replay("small-saga:-")

    assert result.ok, result.violations
    names = result.observation.names()
    [(partition, instance)] = result.observation.instances["first"].items()
    assert (partition, instance.completed, names[instance.started_by]) == ("k0", True, "m0")
    ended = result.observation.outcomes["first"]
    outcomes = sorted((e.partition, e.outcome) for each in ended.values() for e in each)
    assert outcomes == [*[("k0", PROCESSED)] * 3, ("k0", NOT_FOUND), ("k1", NOT_FOUND)]
    # The saga's journal reached second with Closed; the reply went through the header.
    assert [a.name for a in result.observation.applied["first"]] == [
        "m0",
        "m0>charge>charged",
        "m0>charge>charged>ship",
    ]


async def test_every_schedule_with_one_deviation_keeps_every_invariant() -> None:
    for config in (SMALL, POSTGRES):
        summary = await exhaustive(config, max_deviations=1, max_faults=0, limit=BOUND)

        assert summary.violations == 0, summary.failures[:1]
        assert summary.schedules == BOUND


async def test_single_faults_keep_every_invariant() -> None:
    for config in (SMALL, POSTGRES):
        summary = await exhaustive(config, max_deviations=0, max_faults=1, limit=BOUND)

        assert summary.violations == 0, summary.failures[:1]
        assert summary.schedules == BOUND


async def caught(variant: Variant, config: str, invariant: str) -> RunResult:
    """The first schedule with at most one deviation that breaks ``invariant``."""
    found: list[RunResult] = []

    def broken(result: RunResult) -> bool:
        if invariant in {v.invariant for v in result.violations}:
            found.append(result)
        return bool(found)

    summary = await exhaustive(
        CONFIGS[config], max_deviations=1, max_faults=0, variant=variant, stop_when=broken
    )
    assert found, f"{variant.name} went unseen in {summary.schedules} schedules"
    return found[0]


async def test_a_completion_that_deletes_the_row_is_caught_as_a_resurrection() -> None:
    """The second start finds no row, starts the instance again and runs its handlers."""
    result = await caught(SAGA_COMPLETION_DELETES, "small-saga", NO_RESURRECTED_INSTANCE)

    assert not any(result.decisions)  # the default schedule
    broken = {v.invariant for v in result.violations}
    assert NO_PROCESSING_AFTER_COMPLETION in broken


async def test_a_start_that_ignores_the_marker_is_caught_on_both_stores() -> None:
    for config in ("small-saga", "small-saga-postgres"):
        result = await caught(SAGA_MARKER_IGNORED, config, NO_PROCESSING_AFTER_COMPLETION)

        assert NO_RESURRECTED_INSTANCE in {v.invariant for v in result.violations}


async def test_a_not_found_that_writes_the_default_state_is_caught() -> None:
    """The payment for k1 starts an instance nobody started; the second start makes the
    completed k0 live again."""
    for config in ("small-saga", "small-saga-postgres"):
        result = await caught(SAGA_NOT_FOUND_WRITES, config, NO_UNSTARTED_INSTANCE)

        assert NO_RESURRECTED_INSTANCE in {v.invariant for v in result.violations}
        instances = result.observation.instances["first"]
        assert instances["k0"] == Instance(False, instances["k0"].started_by)
