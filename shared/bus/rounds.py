"""Optimistic-concurrency rounds, as every writer of the bus runs them.

A round reads, decides and writes conditionally; when another writer got there first it
raises ``Conflict`` and the next round starts again from the read, after a full-jitter backoff
(``BusConfig.backoff``). After ``BusConfig.max_conflict_rounds`` rounds the invocation gives
up with ``ConflictRetriesExhausted`` (for a received message: the host redelivers it later).
Token mode, the window modes and the ingress client all run their rounds here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from shared.bus.config import BusConfig
from shared.errors import ConflictRetriesExhausted

T = TypeVar("T")


class Conflict(Exception):
    """Another writer got there first; start the round again from the read."""


async def conflict_rounds(
    config: BusConfig, round_once: Callable[[], Awaitable[T]], exhausted: str
) -> T:
    """``round_once()`` until it returns without ``Conflict``, sleeping ``config.backoff(n)``
    before round n (from the second on); ``ConflictRetriesExhausted(exhausted)`` when
    ``config.max_conflict_rounds`` rounds all conflicted."""
    for round_number in range(config.max_conflict_rounds):
        if round_number:
            await config.sleep(config.backoff(round_number))
        try:
            return await round_once()
        except Conflict:
            continue
    raise ConflictRetriesExhausted(exhausted)
