"""Cancellation in the simulator (``small-cancel``, ``lab.sim.cancels``): a saga's timeout, a
handler's delayed send and a client's delayed send each race their cancel while time makes
them due, under copies, a network duplicate, a late redelivery, a cleanup pass and faults at
every storage operation; and the known-bad cancels are caught."""

from __future__ import annotations

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.explore import CONFIGS, exhaustive, replay
from lab.sim.invariants import (
    BOUNDED_RESIDUE,
    CANCEL_OR_PROCESSED_ONCE,
    CANCELLED,
    CancelEnd,
    Instance,
    Observation,
    check_cancels,
)
from lab.sim.variants import (
    CANCEL_UNCOMMITTED,
    CANCEL_WITHOUT_CLAIM,
    RECEIVER_IGNORES_CANCEL,
    VARIANTS,
    Variant,
)
from lab.sim.world import CLIENT, RunResult

SMALL = CONFIGS["small-cancel"]
POSTGRES = CONFIGS["small-cancel-postgres"]
UNBOUNDED = CONFIGS["small-cancel-unbounded"]
BOUND = 150
"""Schedules per search in ``make test``: a few seconds each (the full phases are in
``make simulate``)."""


def test_the_default_simulation_explores_cancels_on_both_stores() -> None:
    planned = [{(name, d, f) for name, d, f in plan} for plan in DEFAULT_PLAN]

    for half in planned:
        assert len(half & {("small-cancel", 1, 0), ("small-cancel", 0, 1)}) == 1
        assert len(half & {("small-cancel-postgres", 1, 0), ("small-cancel-postgres", 0, 1)}) == 1
    assert all(
        ("small-cancel-unbounded", d, f) not in half
        for half in planned
        for d in (0, 1, 2)
        for f in (0, 1)
    )
    assert (SMALL.copies, SMALL.sweeps, SMALL.duplicates, SMALL.waits) == (2, 1, 1, 1)
    assert POSTGRES.cancel
    assert POSTGRES.saga
    assert POSTGRES.store == "postgres"
    assert {name for name in VARIANTS if name.startswith("cancel-")} == {
        "cancel-uncommitted",
        "cancel-without-claim",
        "cancel-ignored-by-receiver",
    }


async def test_the_default_schedule_cancels_all_three_before_they_are_due() -> None:
    """The client cancels m1 first; the completion cancels the timeout and the Remind."""
    result = await replay("small-cancel:-")

    assert result.ok, result.violations
    seen = result.observation
    ends = sorted((e.endpoint, e.source, e.outcomes) for e in seen.cancellable.values())
    assert ends == [
        ("first", "first", [CANCELLED]),
        ("second", "client", [CANCELLED]),
        ("second", "first", [CANCELLED]),
    ]
    assert seen.answers == [CANCELLED]
    assert seen.seen_processed == []
    assert seen.pending == {"k0": []}
    assert seen.instances["first"]["k0"].completed
    assert len(seen.cancel_commands) == 2  # ctx.cancel's and the completion's


async def test_every_schedule_with_one_deviation_keeps_every_invariant() -> None:
    for config in (SMALL, POSTGRES):
        summary = await exhaustive(config, max_deviations=1, max_faults=0, limit=BOUND)

        assert summary.violations == 0, summary.failures[:1]
        assert summary.schedules == BOUND


async def test_single_faults_keep_every_invariant() -> None:
    for config in (SMALL, POSTGRES):
        summary = await exhaustive(config, max_deviations=0, max_faults=1, limit=BOUND)

        assert summary.violations == 0, summary.failures[:1]
        assert summary.schedules == BOUND


async def test_a_cancelled_token_leaves_nothing_for_a_second_cleanup_pass() -> None:
    """A schedule the exhaustive one-fault phase found: before a cancel deleted the token it
    cancelled, the token and its record outlived the final cleanup pass (BoundedResidue),
    the record waiting for the cleanup's R7 of a token nothing else would delete sooner."""
    result = await replay("small-cancel:" + "0." * 31 + "1")

    assert [str(v) for v in result.violations] == []


async def test_a_message_due_before_its_cancel_is_processed_and_the_cancel_says_so() -> None:
    """Time passes before anything runs (m1 is due) and m1's invocation runs before the
    client's cancel: m1 is processed once, and the cancel answers processed."""
    for seed in ("small-cancel:1.2", "small-cancel:0.2.2"):
        result = await replay(seed)

        assert result.ok, result.violations
        seen = result.observation
        [client] = [m for m, end in seen.cancellable.items() if end.source == CLIENT]
        assert seen.seen_processed == [client]
        assert seen.cancellable[client].outcomes == ["processed"]
        assert seen.answers == ["processed"]


async def caught(variant: Variant, config: str, invariant: str, faults: int = 0) -> RunResult:
    """The first schedule with at most one deviation (or one fault) that breaks ``invariant``."""
    found: list[RunResult] = []

    def broken(result: RunResult) -> bool:
        if invariant in {v.invariant for v in result.violations}:
            found.append(result)
        return bool(found)

    deviations = 1 - faults
    summary = await exhaustive(
        CONFIGS[config],
        max_deviations=deviations,
        max_faults=faults,
        variant=variant,
        stop_when=broken,
    )
    assert found, f"{variant.name} went unseen in {summary.schedules} schedules"
    return found[0]


async def test_a_cancel_answered_without_its_commit_is_caught() -> None:
    """The client is told cancelled, and the cancel deletes the token it believes it
    cancelled: the message is then neither processed nor cancelled (lost)."""
    result = await caught(CANCEL_UNCOMMITTED, "small-cancel", CANCEL_OR_PROCESSED_ONCE)

    assert not any(result.decisions)  # the default schedule
    assert result.observation.answers == [CANCELLED]
    assert not result.observation.seen_processed
    assert any("neither processed nor cancelled" in v.detail for v in result.violations)


async def test_a_receiver_that_ignores_a_cancelled_record_is_caught() -> None:
    """Its reads show a cancelled O(t) as claimed and not committed, and so do the
    cleanup's: the cancelled records are never retired."""
    result = await caught(RECEIVER_IGNORES_CANCEL, "small-cancel", BOUNDED_RESIDUE)

    assert not any(result.decisions)
    assert any("outbox records left" in v.detail for v in result.violations)


async def test_a_cancel_without_its_claim_is_caught_when_it_stalls() -> None:
    """Outside the timing assumptions: the canceller reads m1's token and O(m1) absent,
    stalls; m1 is processed, retired and its audit row expires; the canceller wakes and
    commits a fresh O(m1) as cancelled, and answers so."""
    result = await caught(
        CANCEL_WITHOUT_CLAIM, "small-cancel-unbounded", CANCEL_OR_PROCESSED_ONCE, faults=1
    )

    details = [v.detail for v in result.violations]
    assert any("answered cancelled" in d for d in details), details
    assert result.observation.seen_processed


async def test_the_real_cancel_survives_the_same_stalls() -> None:
    summary = await exhaustive(UNBOUNDED, max_deviations=0, max_faults=1, limit=400)

    assert summary.violations == 0, summary.failures[:1]


def test_cancel_or_processed_once_judges_each_end() -> None:
    """Both, neither, an answer that disagrees, a timeout kept pending after it ended."""
    reference = Observation()
    reference.cancellable = {
        "t": CancelEnd("first", "first", [CANCELLED]),
        "m1": CancelEnd("second", CLIENT, [CANCELLED]),
    }
    run = Observation()
    run.cancellable = {"t": CancelEnd("first", "first", ["processed", CANCELLED])}
    run.answers = ["processed"]
    run.pending = {"k0": ["t"]}
    run.instances = {"first": {"k0": Instance(False, "m0")}}

    details = [v.detail for v in check_cancels(run, reference, client=CLIENT)]

    assert details == [
        "m1 was neither processed nor cancelled",
        "t has audit rows saying ['processed', 'cancelled']",
        "the client's cancel of m1 answered processed: audit rows []",
        "instance 'k0' keeps t pending, which ended ['processed', 'cancelled']",
    ]
