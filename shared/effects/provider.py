"""What the performer asks of an external service, and how its answers are classified."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shared.bus.effects import Outcome
from shared.errors import EffectKeyConflict, ProviderUnavailable

KEY_CONFLICT = 409
"""The status a provider answers for a key already used with another body."""
TOO_MANY_REQUESTS = 429


@dataclass(frozen=True)
class ProviderAnswer:
    status: int
    body: dict[str, Any]


class Provider(Protocol):
    """One declared service. ``call`` sends ``body`` to ``operation`` under the idempotency
    ``key``; a refused connection, a dropped one or a timeout raises ProviderUnavailable."""

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer: ...


def outcome_of(answer: ProviderAnswer) -> Outcome:
    """``succeeded`` for 2xx and ``failed`` for a refusal that no retry changes (4xx); a
    status that leaves the outcome open (429, 5xx, anything else) raises ProviderUnavailable,
    to be retried with the same key; a key conflict raises EffectKeyConflict."""
    if 200 <= answer.status < 300:
        return "succeeded"
    if answer.status == KEY_CONFLICT:
        raise EffectKeyConflict(
            "the provider refused the idempotency key as used with another body"
        )
    if 400 <= answer.status < 500 and answer.status != TOO_MANY_REQUESTS:
        return "failed"
    raise ProviderUnavailable(f"the provider answered {answer.status}")
