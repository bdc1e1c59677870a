"""Injectable time, so the in-memory stores and the simulator can run on a controlled clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], float]
"""Returns the current time as seconds since the epoch."""


def system_clock() -> float:
    return time.time()


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


class ManualClock:
    """A clock that moves only when told to; for deterministic tests and simulation."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.now += seconds
