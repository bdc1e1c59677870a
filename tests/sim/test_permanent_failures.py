"""A permanent failure in the simulator (issue 35): the second endpoint's handler grows its
state over a table property on its first run, so its commit is refused and the message is
parked on that try, under a retry policy that would otherwise run it again; once the run is
quiet the operator replays it. Explored with every interleaving of one deviation and every
single fault at every operation, in every mode; and the known-bad variant whose store
writes part of a refused commit is caught."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab.sim.explore import CONFIGS, exhaustive, replay
from lab.sim.variants import PARKED_AFTER_PARTIAL_COMMIT
from lab.sim.world import SimConfig
from shared.bus.app import MODES, Mode

OVERSIZED = CONFIGS["small-oversized"]


def in_mode(mode: Mode) -> SimConfig:
    return replace(OVERSIZED, name=f"{OVERSIZED.name}-{mode}", mode=mode)


async def test_the_fault_free_run_parks_once_replays_and_applies_once() -> None:
    result = await replay("small-oversized:-")

    assert result.violations == []
    assert sum("the operator replays 1 parked message(s)" in step for step in result.trace) == 1


async def test_a_parked_message_under_every_interleaving_of_one_deviation() -> None:
    summary = await exhaustive(OVERSIZED, max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 30


@pytest.mark.parametrize("mode", MODES)
async def test_a_parked_message_under_every_single_fault_in_every_mode(mode: Mode) -> None:
    summary = await exhaustive(in_mode(mode), max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 100


@pytest.mark.parametrize("mode", PARKED_AFTER_PARTIAL_COMMIT.modes)
async def test_parking_after_part_of_the_commit_landed_is_caught(mode: Mode) -> None:
    """The audit row (and O(m), or the processed row) land without the state: the replay
    finds the message done, its outputs were discarded with the parking, and the state never
    applied it."""
    summary = await exhaustive(
        in_mode(mode), max_deviations=0, max_faults=0, variant=PARKED_AFTER_PARTIAL_COMMIT
    )

    assert summary.violations == 1
    assert "NoLostMessages" in {
        v.invariant for _, result in summary.failures for v in result.violations
    }
