"""Issue 42: ``bus verify`` on a state_based endpoint publishing to a token-mode one. The
reported schedule (the sender crashes before its commit after creating its output token, the
redelivery commits and sends, the subscriber processes it, time passes) leaves nothing, and
so does every schedule of the bounded phases; a cleanup that leaves such a token is caught."""

from __future__ import annotations

import asyncio

from lab.sim.choices import DepthFirst, Replay
from lab.sim.invariants import BOUNDED_RESIDUE
from lab.sim.variants import R7_SKIPS_WINDOW_SENDERS
from lab.sim.world import RunResult
from lab.verify.engine import EXHAUSTIVE, Explorer
from lab.verify.inputs import declared_inputs
from lab.verify.world import Target
from tests.verify import pairing_app

REPORTED_SEED = "verify:0.0.0.0.0.0.0.0.0.0.0.1"


def target() -> Target:
    return Target(pairing_app.app, declared_inputs(pairing_app.app, pairing_app.examples))


def test_the_reported_schedule_crashes_the_sender_and_leaves_no_token() -> None:
    result = asyncio.run(Explorer(target()).replay(REPORTED_SEED))

    crashed = [step for step in result.trace if "crash-before" in step]
    assert len(crashed) == 1
    assert "inv0@tickets: table.transact" in crashed[0]
    assert any("inv2@ledger: table.transact" in step for step in result.trace)
    assert result.violations == []
    assert result.observation.tokens == []
    assert result.observation.beyond is not None
    assert result.observation.beyond.tokens == []


def test_every_schedule_with_one_deviation_or_one_fault_passes() -> None:
    async def phase(deviations: int, faults: int) -> list[RunResult]:
        explorer = Explorer(target())
        prefix: list[int] | None = []
        results = []
        while prefix is not None:
            chooser = DepthFirst(prefix, deviations, faults)
            results.append(await explorer.run(EXHAUSTIVE, chooser))
            prefix = chooser.next_prefix()
        return results

    runs = asyncio.run(phase(1, 0)) + asyncio.run(phase(0, 1))

    assert len(runs) >= 100  # 33 and 73 schedules at the time of writing
    assert [r.violations for r in runs if r.violations] == []


def test_a_cleanup_that_leaves_the_receivers_token_is_caught_as_residue() -> None:
    explorer = Explorer(target(), R7_SKIPS_WINDOW_SENDERS)

    result = asyncio.run(explorer.run(EXHAUSTIVE, Replay([])))

    assert {v.invariant for v in result.violations} == {BOUNDED_RESIDUE}
    assert result.observation.tokens[0].startswith("tickets/")
