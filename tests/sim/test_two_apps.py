"""A system of two apps in the simulator (``small-two-apps``): one messaging store, each app's
rows in its own store, each app's cleanup over the whole shared tokens container with only its
own rows. The production cleanup keeps the other app's tokens for their own app; one that
judges them by its own store loses a message."""

from __future__ import annotations

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.explore import CONFIGS, exhaustive
from lab.sim.invariants import NO_LOST_MESSAGES
from lab.sim.variants import FOREIGN_ORIGINS_JUDGED

CONFIG = CONFIGS["small-two-apps"]


def test_the_default_simulation_explores_the_system_of_two_apps() -> None:
    planned = {(name, d, f) for plan in DEFAULT_PLAN for name, d, f in plan}

    assert {("small-two-apps", 1, 0), ("small-two-apps", 0, 1)} <= planned
    assert CONFIG.apps == 2
    assert CONFIG.sweeps >= 2  # room for both apps' passes at once


async def test_every_single_fault_in_a_system_of_two_apps_loses_repeats_and_leaves_nothing() -> (
    None
):
    summary = await exhaustive(CONFIG, max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 300


async def test_one_deviation_in_a_system_of_two_apps_loses_repeats_and_leaves_nothing() -> None:
    """Every schedule with one deviation: the two apps' passes interleaved with each other
    and with processing at every point."""
    summary = await exhaustive(CONFIG, max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 150


async def test_a_cleanup_that_judges_the_other_apps_tokens_as_its_own_loses_a_message() -> None:
    summary = await exhaustive(
        CONFIG, max_deviations=0, max_faults=1, variant=FOREIGN_ORIGINS_JUDGED, stop_at_first=True
    )

    assert summary.violations == 1
    [(_, result)] = summary.failures
    assert NO_LOST_MESSAGES in {v.invariant for v in result.violations}
