"""The rolling phase (issue 29): one endpoint served by two versions of the app at once, an
old one whose app does not know the message type the new one sends, and the new one. The old
one gives back what it cannot read; every run keeps every invariant (nothing lost, parked,
processed twice, or processed by the old version: NoMisreadMessages), also with a crash or
an error at every operation, between the re-send and the acknowledgement among them. Each
known-bad give-back is caught."""

from __future__ import annotations

import pytest

from lab.sim.explore import CONFIGS, exhaustive
from lab.sim.invariants import NO_LOST_MESSAGES, NO_MISREAD_MESSAGES
from lab.sim.readings import WINDOW_MODES
from lab.sim.variants import (
    GIVE_BACK_ACKNOWLEDGED_FIRST,
    GIVE_BACK_MISREADS,
    GIVE_BACK_PARKS_AT_ONCE,
)
from tests.sim.test_variants import breaks, broken


@pytest.mark.parametrize(("deviations", "faults"), [(1, 1), (2, 0)])
async def test_a_rolling_deploy_under_every_interleaving_and_fault(
    deviations: int, faults: int
) -> None:
    summary = await exhaustive(
        CONFIGS["small-rolling"], max_deviations=deviations, max_faults=faults
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 500


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_a_rolling_deploy_in_each_window_mode(mode: str) -> None:
    config = CONFIGS[f"small-rolling-{mode}"]
    for deviations, faults in ((1, 0), (0, 1)):
        summary = await exhaustive(config, max_deviations=deviations, max_faults=faults)

        assert summary.violations == 0, summary.failures[:1]


async def test_acknowledging_before_the_re_send_loses_the_message() -> None:
    """A crash between the acknowledgement and the re-send leaves no signal for the token."""
    summary = await exhaustive(
        CONFIGS["small-rolling"],
        max_deviations=1,
        max_faults=1,
        variant=GIVE_BACK_ACKNOWLEDGED_FIRST,
        stop_when=breaks(NO_LOST_MESSAGES),
    )

    assert NO_LOST_MESSAGES in broken(summary)
    [(_, result)] = summary.failures[-1:]
    assert any("(old): queue.send" in step and "[" in step for step in result.trace)


async def test_an_old_instance_that_parks_at_once_is_caught() -> None:
    summary = await exhaustive(
        CONFIGS["small-rolling"],
        max_deviations=1,
        max_faults=0,
        variant=GIVE_BACK_PARKS_AT_ONCE,
        stop_at_first=True,
    )

    assert summary.violations == 1
    assert NO_LOST_MESSAGES in broken(summary)
    [(_, result)] = summary.failures
    assert any("parked in the poison queue" in str(v) for v in result.violations)


async def test_an_old_instance_that_reads_a_newer_message_anyway_is_caught() -> None:
    summary = await exhaustive(
        CONFIGS["small-rolling"],
        max_deviations=1,
        max_faults=0,
        variant=GIVE_BACK_MISREADS,
        stop_at_first=True,
    )

    assert summary.violations == 1
    assert broken(summary) == {NO_MISREAD_MESSAGES}
