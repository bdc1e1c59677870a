"""Transactional sessions in the simulator (``small-session``, ``lab.sim.sessions``): web
requests commit an order row and the messages they send together, under faults at every
operation of every step, a request racing its retry and the cleanup's sessions task at any
point; and the known-bad sessions are caught."""

from __future__ import annotations

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.explore import CONFIGS, exhaustive, replay
from lab.sim.invariants import (
    NO_DUPLICATED_PROCESSING,
    NO_GHOST_MESSAGES,
    NO_LOST_MESSAGES,
)
from lab.sim.variants import (
    SESSION_KEY_IGNORED,
    SESSION_NOT_RESENT,
    SESSION_SIGNALS_FIRST,
    SESSION_TOKENS_BEFORE_RECORD,
    Variant,
)
from lab.sim.world import RunResult

SMALL = CONFIGS["small-session"]
POSTGRES = CONFIGS["small-session-postgres"]
UNBOUNDED = CONFIGS["small-session-unbounded"]


def test_the_default_simulation_explores_sessions_on_both_stores() -> None:
    planned = {(name, d, f) for plan in DEFAULT_PLAN for name, d, f in plan}

    assert {("small-session", 1, 0), ("small-session", 0, 1)} <= planned
    assert {("small-session-postgres", 1, 0), ("small-session-postgres", 0, 1)} <= planned
    assert (SMALL.client_sends, SMALL.session_rollbacks, SMALL.sweeps, SMALL.waits) == (2, 1, 1, 1)
    assert POSTGRES.session
    assert POSTGRES.store == "postgres"


async def test_every_schedule_with_one_deviation_keeps_every_invariant() -> None:
    """Two sends of one key racing at every operation, a cleanup pass and time at every
    point; and no request alone under its key is ever fenced: a pass during a request
    leaves its young record alone (its commit stays possible)."""
    fenced: list[str] = []

    def note(result: RunResult) -> bool:
        if "conflict" in result.observation.requests.get("m1", []):
            fenced.append(" / ".join(result.trace))
        return False

    summary = await exhaustive(SMALL, max_deviations=1, max_faults=0, stop_when=note)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 1000
    assert fenced == []


async def test_a_retry_after_the_commit_is_answered_as_a_repeat() -> None:
    """In the default schedule m0's second send comes after the first committed: it finds
    the committed O(s), writes and sends nothing and is answered (not refused as a
    conflict, which would leave its client without an answer for good)."""
    result = await replay("small-session:-")

    assert result.ok, result.violations
    assert result.observation.requests == {
        "m0": ["committed", "deduplicated"],
        "m1": ["committed"],
        "m2": ["rolled back"],
    }


async def test_every_single_fault_keeps_every_invariant() -> None:
    summary = await exhaustive(SMALL, max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 1000


async def test_every_single_fault_keeps_every_invariant_on_postgresql() -> None:
    summary = await exhaustive(POSTGRES, max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 1000


async def test_a_stalled_commit_is_fenced_by_the_cleanup() -> None:
    """Outside the timing assumptions: a request may stall before any operation while the
    grace period passes and a cleanup pass runs; nothing is lost or repeated."""
    summary = await exhaustive(UNBOUNDED, max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 90


async def caught(
    variant: Variant, config: str, deviations: int, faults: int, invariant: str
) -> str:
    """The decisions of the first schedule that breaks ``invariant`` under ``variant``."""
    found: list[RunResult] = []

    def broken(result: RunResult) -> bool:
        if invariant in {v.invariant for v in result.violations}:
            found.append(result)
        return bool(found)

    summary = await exhaustive(
        CONFIGS[config],
        max_deviations=deviations,
        max_faults=faults,
        variant=variant,
        stop_when=broken,
    )
    assert found, f"{variant.name} went unseen in {summary.schedules} schedules"
    return ".".join(map(str, found[0].decisions)).rstrip(".0") or "-"


async def test_signals_sent_before_the_commit_are_caught_as_ghosts() -> None:
    """The rolled-back request's Step is processed: in the default schedule."""
    seed = await caught(SESSION_SIGNALS_FIRST, "small-session", 0, 0, NO_GHOST_MESSAGES)

    assert seed == "-"


async def test_a_session_that_ignores_its_key_is_caught_as_a_duplicate() -> None:
    seed = await caught(SESSION_KEY_IGNORED, "small-session", 0, 0, NO_DUPLICATED_PROCESSING)

    assert seed == "-"


async def test_a_cleanup_that_never_resends_is_caught_as_a_loss() -> None:
    """A request that stops between its commit and its signals is finished by the cleanup
    alone (its client does not send it again)."""
    await caught(SESSION_NOT_RESENT, "small-session", 0, 1, NO_LOST_MESSAGES)


async def test_tokens_deleted_before_their_open_record_are_caught_as_a_loss() -> None:
    """A request stalled before its commit past the grace period: the pass deletes its
    tokens but keeps (and does not fence) its open O(s), so the commit lands on tokens
    that are gone."""
    await caught(SESSION_TOKENS_BEFORE_RECORD, "small-session-unbounded", 0, 1, NO_LOST_MESSAGES)
