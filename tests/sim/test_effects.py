"""The effect phase (issue 30, docs/effects.md): a handler requests a charge, the bus's
performer calls the provider after the commit, and the answer comes back to the handler.
Under every schedule and fault explored, each committed effect is applied once in the
provider's ledger, none before its round committed, and its answer is processed once; each
known-bad effect is caught. For a service that honours no key (``small-effect-amo``), each
committed effect is applied at most once, answered once, and ``succeeded`` only if applied."""

from __future__ import annotations

from collections import Counter

from lab.sim.explore import CONFIGS, exhaustive
from lab.sim.invariants import (
    EFFECTS_APPLIED_ONCE,
    EFFECTS_AT_MOST_ONCE,
    NO_DUPLICATED_PROCESSING,
    NO_GHOST_MESSAGES,
)
from lab.sim.variants import (
    AMO_BLIND_MARKER,
    AMO_RETRIED,
    ANSWER_OUTSIDE_OUTBOX,
    EFFECT_ATTEMPT_KEY,
    EFFECT_BEFORE_COMMIT,
)
from lab.sim.world import RunResult
from tests.sim.test_variants import breaks, broken


async def test_an_effect_under_every_single_fault() -> None:
    """Some runs hold a call (it lands after the performer gave up) while a retry or the
    racing copy calls again: the provider answers 409, in progress; retried with the same
    key, the effect is applied once and answered, nothing parked (issue 42)."""
    in_progress: list[int] = []

    def note(result: RunResult) -> bool:
        in_progress.append(result.observation.in_progress)
        return False

    summary = await exhaustive(
        CONFIGS["small-effect"], max_deviations=0, max_faults=1, stop_when=note
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 100
    assert summary.faults > 100
    assert sum(1 for answered in in_progress if answered > 0) > 0


async def test_an_effect_under_every_single_deviation() -> None:
    summary = await exhaustive(CONFIGS["small-effect"], max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 20


async def test_a_key_from_the_attempt_charges_twice_after_a_fault() -> None:
    """With a fresh key per call, the performer's next run after a crash or a lost answer
    is a second charge of the same order."""
    twice: list[RunResult] = []

    def charged_twice(result: RunResult) -> bool:
        if any("was applied 2 times" in str(v) for v in result.violations):
            twice.append(result)
        return bool(twice)

    summary = await exhaustive(
        CONFIGS["small-effect"],
        max_deviations=0,
        max_faults=1,
        variant=EFFECT_ATTEMPT_KEY,
        stop_when=charged_twice,
    )

    assert EFFECTS_APPLIED_ONCE in broken(summary)
    [result] = twice
    assert len([step for step in result.trace if "provider.call" in step]) == 2


async def test_an_effect_performed_by_the_handler_is_caught() -> None:
    summary = await exhaustive(
        CONFIGS["small-effect"],
        max_deviations=0,
        max_faults=0,
        variant=EFFECT_BEFORE_COMMIT,
        stop_at_first=True,
    )

    assert broken(summary) == {EFFECTS_APPLIED_ONCE}
    [(_, result)] = summary.failures
    assert any("before its round committed" in str(v) for v in result.violations)


async def test_an_answer_sent_outside_the_performers_commit_is_processed_twice() -> None:
    """A performer that sends its answer itself sends it on every run: after a crash before
    its commit, the handler processes the answer twice."""
    twice: list[RunResult] = []

    def answered_twice(result: RunResult) -> bool:
        if breaks(NO_DUPLICATED_PROCESSING)(result):
            twice.append(result)
        return bool(twice)

    summary = await exhaustive(
        CONFIGS["small-effect"],
        max_deviations=0,
        max_faults=1,
        variant=ANSWER_OUTSIDE_OUTBOX,
        stop_when=answered_twice,
    )

    assert NO_GHOST_MESSAGES in broken(summary)  # every run: the answer has no committed cause
    [result] = twice
    assert any("applied message m0>succeeded 2 times" in str(v) for v in result.violations)


async def test_an_at_most_once_effect_under_every_single_fault() -> None:
    """Some faults leave the call's outcome unknown: those runs answer ``uncertain`` and call
    no more; the others answer as a fault-free run does."""
    outcomes: Counter[str] = Counter()

    def note(result: RunResult) -> bool:
        entries = [a for journal in result.observation.applied.values() for a in journal]
        outcomes.update(a.outcome for a in entries if a.outcome is not None)
        return False

    summary = await exhaustive(
        CONFIGS["small-effect-amo"], max_deviations=0, max_faults=1, stop_when=note
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 100
    assert outcomes["uncertain"] > 0
    assert outcomes["succeeded"] > 0


async def test_an_at_most_once_effect_under_every_single_deviation() -> None:
    summary = await exhaustive(CONFIGS["small-effect-amo"], max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 20


def applied_twice(result: RunResult) -> bool:
    return any("was applied 2 times" in str(v) for v in result.violations)


async def test_an_at_most_once_call_retried_after_an_unknown_outcome_is_applied_twice() -> None:
    """Declared idempotent, the service is called again after a lost answer: it applies the
    second call too, and the effect is answered ``succeeded`` though applied twice."""
    summary = await exhaustive(
        CONFIGS["small-effect-amo"],
        max_deviations=0,
        max_faults=1,
        variant=AMO_RETRIED,
        stop_when=applied_twice,
    )

    assert broken(summary) == {EFFECTS_AT_MOST_ONCE}
    [(_, result)] = summary.failures
    assert len([step for step in result.trace if "provider.call" in step]) == 2


async def test_a_marker_written_unconditionally_lets_a_second_copy_call_again() -> None:
    summary = await exhaustive(
        CONFIGS["small-effect-amo"],
        max_deviations=0,
        max_faults=1,
        variant=AMO_BLIND_MARKER,
        stop_when=applied_twice,
    )

    assert broken(summary) == {EFFECTS_AT_MOST_ONCE}
    [(_, result)] = summary.failures
    assert len([step for step in result.trace if "table.upsert effects" in step]) == 2
