"""The scheduler keeps track of a process whose parked operation is cancelled under it.

The cleanup judges records in a TaskGroup (``shared.concurrency.each``), one at a time in
the simulation. When one child crashes, the next has already taken the limit and parked at its
storage operation; the TaskGroup then cancels it there. Random seed 2776 is the first seed
where that happened: the scheduler took the process as still waiting at the cancelled
operation, stepped it again and the search crashed with InvalidStateError.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from lab.sim.explore import replay
from lab.sim.scheduler import Scheduler
from shared.concurrency import each
from shared.stores.instrumented import Operation, SimulatedCrash


async def test_the_first_seed_whose_cleanup_child_was_cancelled_at_its_gate_replays() -> None:
    result = await replay("2776")

    assert result.ok, result.violations
    # Which ingress row is read first depends on set order (PYTHONHASHSEED); either way the
    # first read crashes while the second has parked.
    assert re.search(r"sweep1: table\.query ingress/m\d  \[crash-before\]", "\n".join(result.trace))


async def test_a_task_cancelled_at_its_gate_leaves_the_process_to_run_on() -> None:
    scheduler = Scheduler()
    operations = iter(range(100))

    async def judge(target: str) -> None:
        await scheduler.gate(Operation(next(operations), "table.query", target))
        if target == "first":
            raise SimulatedCrash(target)

    async def body() -> str:
        await each(asyncio.Semaphore(1), ["first", "second"], judge)
        return "finished"

    process = await scheduler.spawn("sweep", body, 0.0)
    parked = process.pending
    assert parked == Operation(0, "table.query", "first")

    # The first child crashes; the second has taken the limit and parked before the
    # TaskGroup cancels it: the step returns only once the process has ended.
    await scheduler.step(process)

    assert process.done
    assert process.outcome == "crashed"
    assert process.pending is None
    assert not process.runnable
    with pytest.raises(RuntimeError, match="not waiting"):
        await scheduler.step(process)


async def test_two_operations_of_one_process_at_once_are_reported_not_lost() -> None:
    scheduler = Scheduler()

    async def body() -> str:
        await asyncio.gather(
            scheduler.gate(Operation(0, "table.query", "first")),
            scheduler.gate(Operation(1, "table.query", "second")),
        )
        return "finished"

    process = await scheduler.spawn("both", body, 0.0)

    assert process.done
    assert process.outcome.startswith("raised ConcurrentOperations")
