"""A provider kept in memory with the idempotency semantics of Stripe's keys: the same key
with the same body returns the first answer without applying anything again; the same key
with another body is refused (422); a call under a key whose first call is still running is
answered 409, "in progress", and applies nothing. What it applied is kept in a ledger, which
the simulator and the tests read to check that every committed effect was applied once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.bus.ids import derived_id
from shared.effects.provider import IN_PROGRESS, KEY_REUSED, ProviderAnswer
from shared.errors import ProviderUnavailable

DECLINE_FIELD = "decline"
"""A body with this field true is refused for good (402), as a card declined."""
PAYMENT_REQUIRED = 402
IN_PROGRESS_ANSWER = ProviderAnswer(IN_PROGRESS, {"error": "a request with this key is running"})


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    operation: str
    body: dict[str, Any]


@dataclass
class Running:
    """A first call of a key that is still running, and the calls refused meanwhile."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    refused: int = 0
    holding: asyncio.Task[None] | None = None


@dataclass
class InMemoryProvider:
    """``lost_answers``: that many of the next calls are applied but their answer is lost
    (the caller sees ProviderUnavailable: an unknown outcome); ``unavailable``: that many of
    the next calls are refused before anything is applied (a 503). ``honours_keys`` False:
    a service that ignores idempotency keys, as those declared at-most-once do, and applies
    every call it is sent. ``declines``: that many of the next calls with a key it has not
    answered yet are refused for good (402), whatever their body says. ``busy_until_refused``:
    the first call of each key, once applied, keeps running (a slow provider) until that many
    other calls under its key were answered "in progress"; a caller that gives up on it first
    leaves it running."""

    lost_answers: int = 0
    unavailable: int = 0
    declines: int = 0
    honours_keys: bool = True
    busy_until_refused: int = 0
    ledger: list[LedgerEntry] = field(default_factory=list)
    calls: int = 0
    in_progress_answered: int = 0
    _answers: dict[str, tuple[str, ProviderAnswer]] = field(default_factory=dict)
    _running: dict[str, Running] = field(default_factory=dict)

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        self.calls += 1
        if self.unavailable > 0:
            self.unavailable -= 1
            return ProviderAnswer(503, {"error": "unavailable"})
        if self.honours_keys and key in self._running:
            return self._in_progress(key)
        first = self.honours_keys and key not in self._answers
        answer = self.apply(operation, body, key)
        if first and self.busy_until_refused > 0:
            await self._keep_running(key)
        if self.lost_answers > 0:
            self.lost_answers -= 1
            raise ProviderUnavailable("the connection dropped before the answer")
        return answer

    def apply(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        """The provider's side of one call: the first answer for a known key and body."""
        fingerprint = json.dumps([operation, body], sort_keys=True)
        if self.honours_keys and key in self._answers:
            first, answer = self._answers[key]
            return answer if first == fingerprint else ProviderAnswer(KEY_REUSED, {})
        if body.get(DECLINE_FIELD) is True or self._declining():
            answer = ProviderAnswer(PAYMENT_REQUIRED, {"error": "declined"})
        else:
            self.ledger.append(LedgerEntry(key, operation, dict(body)))
            answer = ProviderAnswer(200, {"id": derived_id(key, "applied"), "operation": operation})
        self._answers[key] = (fingerprint, answer)
        return answer

    def _in_progress(self, key: str) -> ProviderAnswer:
        self.in_progress_answered += 1
        running = self._running[key]
        running.refused += 1
        if running.refused >= self.busy_until_refused:
            del self._running[key]  # done: the next call gets its answer
            running.done.set()
        return IN_PROGRESS_ANSWER

    async def _keep_running(self, key: str) -> None:
        """Hold the first call of ``key`` until enough calls under it were refused. The hold
        is a task of its own, shielded: a caller that stops waiting (its timeout) leaves the
        key in progress, as a real provider keeps working on a call its client gave up on."""
        running = self._running[key] = Running()
        running.holding = asyncio.create_task(self._hold(key, running))
        await asyncio.shield(running.holding)

    async def _hold(self, key: str, running: Running) -> None:
        try:
            await running.done.wait()
        finally:
            if self._running.get(key) is running:
                del self._running[key]

    def _declining(self) -> bool:
        if self.declines <= 0:
            return False
        self.declines -= 1
        return True

    def applied(self, key: str) -> int:
        """How many times the ledger holds ``key``: 1 for a performed effect, never more."""
        return sum(1 for entry in self.ledger if entry.key == key)
