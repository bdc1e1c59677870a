"""A provider kept in memory with the idempotency semantics of Stripe's keys: the same key
with the same body returns the first answer without applying anything again; the same key
with another body is refused (409). What it applied is kept in a ledger, which the simulator
and the tests read to check that every committed effect was applied once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.bus.ids import derived_id
from shared.effects.provider import KEY_CONFLICT, ProviderAnswer
from shared.errors import ProviderUnavailable

DECLINE_FIELD = "decline"
"""A body with this field true is refused for good (402), as a card declined."""
PAYMENT_REQUIRED = 402


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    operation: str
    body: dict[str, Any]


@dataclass
class InMemoryProvider:
    """``lost_answers``: that many of the next calls are applied but their answer is lost
    (the caller sees ProviderUnavailable: an unknown outcome); ``unavailable``: that many of
    the next calls are refused before anything is applied (a 503). ``honours_keys`` False:
    a service that ignores idempotency keys, as those declared at-most-once do, and applies
    every call it is sent. ``declines``: that many of the next calls with a key it has not
    answered yet are refused for good (402), whatever their body says."""

    lost_answers: int = 0
    unavailable: int = 0
    declines: int = 0
    honours_keys: bool = True
    ledger: list[LedgerEntry] = field(default_factory=list)
    calls: int = 0
    _answers: dict[str, tuple[str, ProviderAnswer]] = field(default_factory=dict)

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        self.calls += 1
        if self.unavailable > 0:
            self.unavailable -= 1
            return ProviderAnswer(503, {"error": "unavailable"})
        answer = self.apply(operation, body, key)
        if self.lost_answers > 0:
            self.lost_answers -= 1
            raise ProviderUnavailable("the connection dropped before the answer")
        return answer

    def apply(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        """The provider's side of one call: the first answer for a known key and body."""
        fingerprint = json.dumps([operation, body], sort_keys=True)
        if self.honours_keys and key in self._answers:
            first, answer = self._answers[key]
            return answer if first == fingerprint else ProviderAnswer(KEY_CONFLICT, {})
        if body.get(DECLINE_FIELD) is True or self._declining():
            answer = ProviderAnswer(PAYMENT_REQUIRED, {"error": "declined"})
        else:
            self.ledger.append(LedgerEntry(key, operation, dict(body)))
            answer = ProviderAnswer(200, {"id": derived_id(key, "applied"), "operation": operation})
        self._answers[key] = (fingerprint, answer)
        return answer

    def _declining(self) -> bool:
        if self.declines <= 0:
            return False
        self.declines -= 1
        return True

    def applied(self, key: str) -> int:
        """How many times the ledger holds ``key``: 1 for a performed effect, never more."""
        return sum(1 for entry in self.ledger if entry.key == key)
