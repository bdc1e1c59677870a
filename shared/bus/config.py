"""Tunable settings of a bus runtime, with the defaults users get."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shared.bus.ids import fresh_id
from shared.clock import Clock, system_clock


@dataclass(frozen=True)
class BusConfig:
    tokens_container: str = "tokens"
    topics_container: str = "topics"
    ingress_table: str = "ingress"
    max_conflict_rounds: int = 12
    """Optimistic-concurrency retries inside one invocation before giving the message back."""
    backoff_base: float = 0.005
    backoff_cap: float = 0.5
    max_create_attempts: int = 3
    """Fresh attempt ids tried per outgoing token when a create's outcome is unknown."""
    max_payload_bytes: int = 256 * 1024
    max_outputs: int = 100
    topic_cache_seconds: float = 5.0
    ingress_window_seconds: float = 7 * 24 * 3600.0
    """The only time window in the system: client retries with one idempotency key are
    deduplicated for this long."""
    clock: Clock = system_clock
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    new_id: Callable[[], str] = fresh_id
    """Source of claim and attempt ids (random; injectable so simulations replay exactly)."""
    jitter: random.Random = field(default_factory=random.Random)

    def backoff(self, round_number: int) -> float:
        """Full-jitter exponential backoff: spreads out copies that collide on one partition."""
        ceiling = min(self.backoff_cap, self.backoff_base * (2**round_number))
        return self.jitter.uniform(0, ceiling)
