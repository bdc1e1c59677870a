"""The small configuration, explored exhaustively: one message, two concurrent copies, one
outgoing message. Every run must satisfy every invariant."""

from __future__ import annotations

import pytest

from lab.sim.explore import CONFIGS, exhaustive


async def test_every_interleaving_with_two_deviations_keeps_every_invariant() -> None:
    summary = await exhaustive(CONFIGS["small"], max_deviations=2, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    # Every way of placing two context switches among ~25 operations of three processes.
    assert summary.schedules > 500


async def test_every_single_fault_at_every_operation_keeps_every_invariant() -> None:
    summary = await exhaustive(CONFIGS["small"], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    # Every operation of the run gets every fault kind that differs at it (reads: crash and
    # error before; writes: crash or error before or after, or a request that lands late).
    assert summary.schedules > 80
    assert summary.faults == summary.schedules - 1


@pytest.mark.slow
async def test_every_interleaving_with_one_deviation_times_every_single_fault() -> None:
    summary = await exhaustive(CONFIGS["small"], max_deviations=1, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 3000


@pytest.mark.slow
async def test_with_a_cleanup_pass_and_time_passing_at_any_point() -> None:
    summary = await exhaustive(CONFIGS["small-sweep"], max_deviations=1, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 5000
