"""The simulator over token-mode endpoints that keep their rows in PostgreSQL (its in-memory
model): every interleaving and every fault at every operation, SQL ones included, keep the
same invariants as on tables."""

from __future__ import annotations

import pytest

from shared.errors import ConfigurationError
from shared.sim.explore import CONFIGS, exhaustive
from shared.sim.world import SimConfig


async def test_every_interleaving_with_two_deviations_keeps_every_invariant() -> None:
    summary = await exhaustive(CONFIGS["small-postgres"], max_deviations=2, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 500


async def test_every_single_fault_at_every_operation_keeps_every_invariant() -> None:
    summary = await exhaustive(CONFIGS["small-postgres"], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 80
    assert summary.faults == summary.schedules - 1


@pytest.mark.slow
async def test_with_a_cleanup_pass_and_time_passing_at_any_point() -> None:
    summary = await exhaustive(CONFIGS["small-sweep-postgres"], max_deviations=1, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]


def test_postgres_state_is_refused_for_window_modes() -> None:
    with pytest.raises(ConfigurationError, match="token-mode"):
        SimConfig(mode="processed_messages", store="postgres")
