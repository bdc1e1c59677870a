"""The shared-payload phase (``small-shared``): an event whose two subscribers' tokens share
one payload blob. The real code never lets a receiver meet a missing payload for a token it
may still process and leaves no payload behind; each known-bad variant of the payload
cleanup is caught, by the invariant it breaks."""

from __future__ import annotations

from lab.sim.explore import CONFIGS, Summary, exhaustive, replay
from lab.sim.invariants import (
    BOUNDED_RESIDUE,
    NO_MISSING_PAYLOAD,
    NO_PAYLOAD_READ_BY_COPIES,
    Observation,
    check,
)
from lab.sim.variants import (
    PAYLOAD_READ_EARLY,
    PAYLOAD_REMOVED_WITH_TOKENS,
    PAYLOAD_REMOVED_YOUNG,
    Variant,
)


def broken(summary: Summary) -> set[str]:
    return {v.invariant for _, result in summary.failures for v in result.violations}


async def caught(config: str, variant: Variant, *, deviations: int, faults: int) -> Summary:
    return await exhaustive(
        CONFIGS[config],
        max_deviations=deviations,
        max_faults=faults,
        variant=variant,
        stop_at_first=True,
    )


async def test_the_default_schedule_writes_one_payload_and_reads_it_from_both_subscribers() -> None:
    result = await replay("small-shared:-")

    assert result.ok, result.violations
    writes = [step for step in result.trace if "blob.upload payloads" in step]
    reads = [step for step in result.trace if "blob.read payloads" in step]
    assert (len(writes), len(reads)) == (1, 2)
    assert not result.observation.payloads  # the final pass removed it


async def test_every_schedule_with_one_deviation_or_one_fault_keeps_every_invariant() -> None:
    config = CONFIGS["small-shared"]

    interleaved = await exhaustive(config, max_deviations=1, max_faults=0)
    faulted = await exhaustive(config, max_deviations=0, max_faults=1)

    assert (interleaved.violations, faulted.violations) == (0, 0), [
        str(v) for _, r in interleaved.failures + faulted.failures for v in r.violations
    ]
    # A fault at a state-table request makes the message wait (re-sent hidden, the failure
    # table's WAIT row): the re-send is one more operation a fault can hit, 191 points, not 176.
    assert (interleaved.schedules, faulted.schedules) == (90, 191)


async def test_a_window_mode_and_a_stalled_round_keep_every_invariant() -> None:
    window = await exhaustive(
        CONFIGS["small-shared-processed_messages"], max_deviations=1, max_faults=0
    )
    stalled = await exhaustive(CONFIGS["small-shared-unbounded"], max_deviations=0, max_faults=1)

    assert (window.violations, stalled.violations) == (0, 0)


async def test_removing_a_payload_while_a_token_refers_to_it_is_caught() -> None:
    """Without the token check, the pass that comes while a subscriber's copy waits for its
    redelivery removes the payload: the redelivery finds it missing while its token is
    there (and, retried to the end, parks the message)."""
    summary = await caught("small-shared", PAYLOAD_REMOVED_WITH_TOKENS, deviations=0, faults=1)

    assert summary.violations == 1
    assert NO_MISSING_PAYLOAD in broken(summary)


async def test_removing_a_young_payload_is_caught_where_no_fence_covers_it() -> None:
    """A window mode's origin row appears only at its commit: a pass between the payload's
    write and the tokens' creation finds no token and no row, and removes what the round
    is about to commit tokens for."""
    summary = await caught(
        "small-shared-processed_messages", PAYLOAD_REMOVED_YOUNG, deviations=1, faults=0
    )

    assert summary.violations == 1
    assert NO_MISSING_PAYLOAD in broken(summary)


async def test_a_payload_left_behind_is_residue() -> None:
    """BoundedResidue covers the payloads container: the check reports one left."""
    seen = Observation(payloads=["first/00000000-0000-0000-0000-000000000000/x"])

    found = check(seen, Observation(), client="client", residue=True)

    assert [v.invariant for v in found] == [BOUNDED_RESIDUE]


async def test_a_copy_reading_the_payload_before_its_dedup_check_is_caught() -> None:
    """Reading the payload with the token (before the claim) makes every copy of a processed
    message download the body: in token mode a copy that comes after the processing; in a
    window mode the redelivery after a crash between the commit and the token's delete."""
    token = await caught("small-shared", PAYLOAD_READ_EARLY, deviations=1, faults=0)
    window = await caught(
        "small-shared-processed_messages", PAYLOAD_READ_EARLY, deviations=0, faults=1
    )

    assert (token.violations, window.violations) == (1, 1)
    assert broken(token) == broken(window) == {NO_PAYLOAD_READ_BY_COPIES}
