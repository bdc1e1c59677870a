"""The parked phase (``small-parked``, lab/sim/parked.py): the cleanup's poison task beside an
operator's replay and discard. The real code keeps every parked message and leaves no orphan
original; each known-bad variant of the poison task is caught, by the invariant it breaks."""

from __future__ import annotations

import pytest

from lab.sim.explore import CONFIGS, Summary, exhaustive, random_search, replay
from lab.sim.invariants import (
    BOUNDED_PARKED_RESIDUE,
    NO_EXPIRED_ENTRY,
    NO_LOST_PARKED,
    ORIGINAL_KEPT,
    Observation,
    ParkedEntry,
    ParkedObservation,
    check_parked,
)
from lab.sim.variants import MARGIN_IGNORED, ORPHANS_UNCHECKED, REPARK_DELETES_FIRST, Variant

PARKED = CONFIGS["small-parked"]


def broken(summary: Summary) -> set[str]:
    return {v.invariant for _, result in summary.failures for v in result.violations}


async def caught(variant: Variant, *, deviations: int, faults: int) -> Summary:
    return await exhaustive(
        PARKED, max_deviations=deviations, max_faults=faults, variant=variant, stop_at_first=True
    )


async def test_the_default_schedule_replays_two_parked_messages_and_discards_one() -> None:
    result = await replay("small-parked:-")

    assert result.ok, result.violations
    assert any("replay" in step for step in result.trace)
    assert any("discard" in step for step in result.trace)
    names = {a.name for a in result.observation.applied["first"]}
    assert names == {"m0", "m1"}  # m2 was discarded


async def test_the_discard_takes_its_messages_token_and_leaves_no_residue() -> None:
    """Parked before its claim, the discarded message's token waited for it; the discard
    removes it (a token left over is residue for BoundedResidue, not excused)."""
    result = await replay("small-parked:-")

    assert result.ok, result.violations
    assert any("blob.delete tokens/" in step and "discard" in step for step in result.trace)
    assert result.observation.tokens == []


async def test_every_schedule_with_one_deviation_keeps_what_is_parked() -> None:
    summary = await exhaustive(PARKED, max_deviations=1, max_faults=0)

    assert summary.schedules > 300
    assert summary.violations == 0, summary.failures[:1]


async def test_every_single_fault_keeps_what_is_parked() -> None:
    summary = await exhaustive(PARKED, max_deviations=0, max_faults=1)

    assert summary.faults > 100
    assert summary.violations == 0, summary.failures[:1]


@pytest.mark.slow
async def test_every_schedule_with_one_deviation_times_every_single_fault() -> None:
    """About 125,000 runs, 15 minutes of CPU: not part of make simulate (docs/simulation.md)."""
    summary = await exhaustive(PARKED, max_deviations=1, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 100_000


async def test_random_schedules_with_faults_keep_what_is_parked() -> None:
    """Up to two faults and any number of deviations: a scheduled pass crashing in the middle
    of a re-park, while the replay and the discard hold entries, is among them."""
    summary = await random_search(range(300), config=PARKED)

    assert summary.faults > 300
    assert summary.violations == 0, summary.failures[:1]


async def test_a_cleanup_that_ignores_the_margin_lets_the_hosts_move_expire() -> None:
    """The time jump (one margin, a pass at its start) is free: no deviation, no fault."""
    summary = await caught(MARGIN_IGNORED, deviations=0, faults=0)

    assert {NO_EXPIRED_ENTRY, NO_LOST_PARKED} <= broken(summary)


async def test_deleting_originals_in_a_pass_that_missed_entries_loses_a_replay() -> None:
    """The replay holds the entries hidden; a pass that takes what it saw for all there is
    deletes the original the replay is about to read."""
    summary = await caught(ORPHANS_UNCHECKED, deviations=1, faults=0)

    assert {ORIGINAL_KEPT, NO_LOST_PARKED} <= broken(summary)


async def test_a_re_park_that_deletes_first_loses_the_entry_to_a_failed_send() -> None:
    """It needs a scheduled pass and a crash or a failed send between its delete and its
    send: the random search over this configuration meets one within a few hundred seeds
    (seed 274, a send that fails before it is applied, since the discard also removes its
    token and so takes more steps; the depth-first search with one deviation and one fault
    reaches a pass started early only late)."""
    summary = await random_search(
        range(400), config=PARKED, variant=REPARK_DELETES_FIRST, stop_at_first=True
    )

    assert NO_LOST_PARKED in broken(summary)
    [(_, result)] = summary.failures
    delete = next(
        i
        for i, step in enumerate(result.trace)
        if "sweep" in step and "queue.delete first-poison" in step
    )
    assert any("crash" in step or "[error-" in step for step in result.trace[delete:])


def test_an_orphan_original_left_after_the_final_pass_is_residue() -> None:
    """What the real code never leaves, the check names: an original no entry refers to, and
    an entry whose original is gone."""
    seen = ParkedObservation(
        entries=[ParkedEntry("a", "first/gone", readable=False)], originals={"first/orphan"}
    )

    found = {v.invariant for v in check_parked(Observation(), seen, "first", {})}

    assert found == {BOUNDED_PARKED_RESIDUE, ORIGINAL_KEPT}
