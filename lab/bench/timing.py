"""Operation counting plus enqueue times, and the percentile arithmetic of the report."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from shared.errors import InvalidValue
from shared.stores.instrumented import Instrumentation

T = TypeVar("T")


@dataclass
class TimedInstrumentation(Instrumentation):
    """Counts every storage operation like its base, and remembers when each queue message
    was enqueued (keyed by the id the queue gave it), so the receiving side can measure the
    latency from enqueue to handled without changing any message format."""

    enqueued: dict[str, float] = field(default_factory=dict)
    empty_receives: int = 0
    """Receives that found the queue empty: a listener waiting, not work for a message."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time spent waiting for each kind of operation, summed."""

    async def run(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            result = await super().run(kind, target, call)
        finally:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - started
        if kind == "queue.send":
            self.enqueued[str(result)] = time.perf_counter()
        elif kind == "queue.receive" and not result:
            self.empty_receives += 1
        return result


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (the value below which ``fraction`` of the samples lie)."""
    if not 0 < fraction <= 1:
        raise InvalidValue(f"percentile fraction must be in (0, 1], got {fraction}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]
