"""Known-bad variants of the pipeline: the simulator must catch each one, and say which
invariant it broke. This is the evidence that the checker can fail."""

from __future__ import annotations

from collections.abc import Callable

from lab.sim.explore import CONFIGS, Summary, exhaustive
from lab.sim.variants import (
    DELETE_BEFORE_SEND,
    NO_CLAIM,
    NO_OUTBOX_IN_COMMIT,
    REUSED_ATTEMPT_ID,
    Variant,
)
from lab.sim.world import RunResult


def broken(summary: Summary) -> set[str]:
    return {v.invariant for _, result in summary.failures for v in result.violations}


def breaks(invariant: str) -> Callable[[RunResult], bool]:
    def stop(result: RunResult) -> bool:
        return any(v.invariant == invariant for v in result.violations)

    return stop


async def single_faults(variant: Variant) -> Summary:
    return await exhaustive(
        CONFIGS["small"], max_deviations=0, max_faults=1, variant=variant, stop_at_first=True
    )


async def test_deleting_the_incoming_token_before_sending_loses_the_output() -> None:
    summary = await single_faults(DELETE_BEFORE_SEND)

    assert summary.violations == 1
    assert "NoLostMessages" in broken(summary)


async def test_reusing_an_attempt_id_after_an_unknown_create_leaves_a_token_forever() -> None:
    """The late create lands after the receiver consumed and deleted the token: it comes
    back as a committed token nobody will ever signal again. A window-mode receiver deletes
    its token inline, right after its signals."""
    summary = await exhaustive(
        CONFIGS["small-processed_messages"],
        max_deviations=0,
        max_faults=1,
        variant=REUSED_ATTEMPT_ID,
        stop_at_first=True,
    )

    assert summary.violations == 1
    assert "BoundedResidue" in broken(summary)
    [(_, result)] = summary.failures
    assert any("late request lands" in step for step in result.trace)


async def test_a_token_mode_receiver_keeps_its_token_past_any_late_create() -> None:
    """The same variant under token mode: the token stays, claimed, until the cleanup's R7 a
    grace period after the commit, so the late create finds it there and fails; and the
    cleanup that deletes it runs after every late request has landed."""
    for name in ("small", "small-unbounded-sweep"):
        summary = await exhaustive(
            CONFIGS[name], max_deviations=0, max_faults=1, variant=REUSED_ATTEMPT_ID
        )

        assert summary.violations == 0, summary.failures[:1]
        assert summary.schedules > 100


async def test_committing_state_without_the_outbox_record_is_caught() -> None:
    """O(m) stays uncommitted, so a redelivery runs the handler again; its commit can never
    succeed and the message ends in the poison queue."""
    summary = await single_faults(NO_OUTBOX_IN_COMMIT)

    assert summary.violations == 1
    assert "NoLostMessages" in broken(summary)


async def test_without_the_claim_a_stalled_copy_processes_the_message_again() -> None:
    """A copy that read the token, then stalled past the cleanup (and the audit retention),
    finds no O(m) and, with no claim to fail on, runs the handler a second time."""
    summary = await exhaustive(
        CONFIGS["small-unbounded"],
        max_deviations=0,
        max_faults=1,
        variant=NO_CLAIM,
        stop_when=breaks("NoDuplicatedProcessing"),
    )

    assert "NoDuplicatedProcessing" in broken(summary)


async def test_with_the_claim_a_stalled_copy_never_processes_twice() -> None:
    """The same exploration with the real pipeline: no duplicate, ghost or inconsistent
    output (a stall beyond the grace period may still lose a message: see docs/simulation.md)."""
    summary = await exhaustive(CONFIGS["small-unbounded"], max_deviations=0, max_faults=1)

    assert summary.schedules > 80
    assert not broken(summary) & {
        "NoDuplicatedProcessing",
        "NoGhostMessages",
        "ConsistentOutput",
    }
