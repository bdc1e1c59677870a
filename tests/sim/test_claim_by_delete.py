"""Issue 33: token mode's claim as the token's conditional delete, explored in the simulator
(``lab.sim.claim_by_delete``). The reduction kept instead, R7 left to the cleanup, is
production's path now (``shared.bus.receiver``). docs/claim-by-delete.md has the schedules
these tests find."""

from __future__ import annotations

import re

import pytest

from lab.sim.choices import Replay
from lab.sim.explore import CONFIGS, exhaustive, simulate
from lab.sim.world import RunResult


async def first_violation(name: str, deviations: int, faults: int) -> RunResult:
    summary = await exhaustive(
        CONFIGS[name], max_deviations=deviations, max_faults=faults, stop_at_first=True
    )
    assert summary.violations == 1, f"nothing found in {name}"
    [(_, result)] = summary.failures
    return result


def invariants(result: RunResult) -> set[str]:
    return {v.invariant for v in result.violations}


@pytest.mark.parametrize(
    ("rule", "deviations", "invariant"),
    [
        # Resume whenever the token is gone: a copy that comes back after the cleanup retired
        # the first copy's O(m) inserts one of its own, finds the token gone and processes.
        ("resume", 0, "NoDuplicatedProcessing"),
        # Resume only from an O(m) this copy did not insert: a second copy reads the O(m)
        # the late copy inserted before the late copy drops it.
        ("unless-inserted", 1, "NoDuplicatedProcessing"),
        # Never resume: a crash between the claim and the commit loses the message.
        ("duplicate", 0, "NoLostMessages"),
        # Production's cleanup rule (an uncommitted O(m) whose token is gone is retired): the
        # redelivery after the grace period finds neither and acknowledges.
        ("retire", 0, "NoLostMessages"),
    ],
)
async def test_each_rule_for_a_claim_that_finds_the_token_gone_breaks_an_invariant(
    rule: str, deviations: int, invariant: str
) -> None:
    result = await first_violation(f"claim-by-delete-{rule}", deviations, faults=1)

    assert invariant in invariants(result)


async def test_reading_the_token_before_inserting_o_m_holds_within_the_timing_assumptions() -> None:
    summary = await exhaustive(
        CONFIGS["claim-by-delete-read-first"], max_deviations=0, max_faults=1
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 150


async def test_reading_the_token_first_leans_on_time_that_a_stalled_copy_outlasts() -> None:
    """The metadata claim holds here (``small-unbounded-sweep`` in the default plan)."""
    result = await first_violation("claim-by-delete-read-first-unbounded", 1, faults=1)

    assert "NoDuplicatedProcessing" in invariants(result)
    assert any("stalls before" in line for line in result.trace)


def storage_operations(result: RunResult, endpoint: str) -> int:
    """Blob and table requests of the first invocation at ``endpoint`` (its queue receive and
    acknowledgement left out: every protocol makes them)."""
    pattern = re.compile(rf"^\s*\d+ inv0@{endpoint}: (blob|table)\.")
    return sum(1 for line in result.trace if pattern.match(line))


async def fault_free(name: str) -> RunResult:
    result = await simulate(CONFIGS[name], Replay([]))
    assert not result.violations, result.violations
    return result


async def test_the_safe_claim_by_delete_costs_more_than_the_metadata_claim() -> None:
    """Hinted path of the first endpoint: production's R2, R3, R4, R5 (create, commit), with
    R7 left to the cleanup, against read-first's R1, R2, R3, R4 (the delete), R5: the read
    the hint saved comes back, and the request the delete saves production saves too."""
    production = await fault_free("small")
    read_first = await fault_free("claim-by-delete-read-first")

    assert storage_operations(production, "first") == 5
    assert storage_operations(read_first, "first") == 6
