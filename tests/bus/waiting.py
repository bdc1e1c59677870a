"""Letting time pass in the bus tests: in short steps, until what a test waits for has
happened, so that a test waits as long as the bus needs and no longer. On the in-memory
stores each step moves the manual clock; on Azurite real time passes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.bus.harness import Harness

STEP = 0.2
"""Seconds between two looks: small beside the queue's whole-second visibility delays."""


async def wait_until(
    harness: Harness, happened: Callable[[], Awaitable[bool]], *, within: float
) -> float:
    """Look at once whether ``happened()`` holds, then again every ``STEP`` as time passes;
    returns the seconds that passed on the bus's clock. Fails the test if it has not happened
    after ``within`` seconds."""
    clock = harness.config.clock
    started = clock()
    while not await happened():
        if clock() - started > within:
            pytest.fail(f"still waiting after {within:g} s")
        await harness.backend.elapse(STEP)
    return clock() - started
