"""The simulator over endpoints that keep their rows in PostgreSQL (its in-memory model), in
token mode and in each window mode: every interleaving and every fault at every operation,
SQL ones included, keep the same invariants as on tables."""

from __future__ import annotations

import pytest

from lab.sim.explore import CONFIGS, exhaustive
from lab.sim.readings import WINDOW_MODES


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


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_window_modes_in_postgres_keep_every_invariant_under_reordering(mode: str) -> None:
    """A window mode's rows in (the model of) PostgreSQL: every schedule with up to two
    deviations from the default order."""
    summary = await exhaustive(CONFIGS[f"small-postgres-{mode}"], max_deviations=2, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 300


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_window_modes_in_postgres_keep_every_invariant_under_every_fault(mode: str) -> None:
    """Every single fault at every operation, the SQL reads, updates and commits included."""
    summary = await exhaustive(CONFIGS[f"small-postgres-{mode}"], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.faults == summary.schedules - 1
    assert summary.schedules > 60


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_window_modes_in_postgres_keep_concurrent_messages_of_one_partition_apart(
    mode: str,
) -> None:
    """Three messages of one partition: only the row versions keep one commit from
    overwriting another (with the model's version check off, processed_messages and
    entity_outbox show ConsistentOutput violations here)."""
    summary = await exhaustive(
        CONFIGS[f"small-partition-postgres-{mode}"], max_deviations=1, max_faults=0
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 60


@pytest.mark.slow
@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_window_modes_in_postgres_with_a_cleanup_pass_at_any_point(mode: str) -> None:
    summary = await exhaustive(
        CONFIGS[f"small-sweep-postgres-{mode}"], max_deviations=1, max_faults=1
    )

    assert summary.violations == 0, summary.failures[:1]
