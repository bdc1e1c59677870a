"""``shared.bus.rounds.conflict_rounds``, which token mode, the window modes and the ingress
client run their optimistic-concurrency rounds with."""

from __future__ import annotations

import random

import pytest

from shared.bus.config import BusConfig
from shared.bus.rounds import Conflict, conflict_rounds
from shared.errors import ConflictRetriesExhausted


def config_sleeping_into(slept: list[float], rounds: int = 4) -> BusConfig:
    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    return BusConfig(max_conflict_rounds=rounds, sleep=sleep, jitter=random.Random(7))


async def test_a_round_that_returns_ends_the_rounds_without_sleeping() -> None:
    slept: list[float] = []
    calls = 0

    async def once() -> str:
        nonlocal calls
        calls += 1
        return "done"

    assert await conflict_rounds(config_sleeping_into(slept), once, "never") == "done"
    assert (calls, slept) == (1, [])


async def test_each_conflict_backs_off_before_the_next_round() -> None:
    slept: list[float] = []
    config = config_sleeping_into(slept)
    expected = BusConfig(jitter=random.Random(7))  # the same jitter sequence
    conflicts = 2

    async def once() -> int:
        nonlocal conflicts
        if conflicts:
            conflicts -= 1
            raise Conflict
        return 3

    assert await conflict_rounds(config, once, "never") == 3
    assert slept == [expected.backoff(1), expected.backoff(2)]


async def test_rounds_that_all_conflict_give_up_with_the_message_given() -> None:
    slept: list[float] = []
    calls = 0

    async def once() -> None:
        nonlocal calls
        calls += 1
        raise Conflict

    with pytest.raises(ConflictRetriesExhausted, match=r"^still conflicting$"):
        await conflict_rounds(config_sleeping_into(slept, rounds=3), once, "still conflicting")
    assert (calls, len(slept)) == (3, 2)


async def test_any_other_error_ends_the_rounds_at_once() -> None:
    slept: list[float] = []

    async def once() -> None:
        raise ValueError("not a conflict")

    with pytest.raises(ValueError, match="not a conflict"):
        await conflict_rounds(config_sleeping_into(slept), once, "never")
    assert slept == []
