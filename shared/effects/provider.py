"""What the performer asks of an external service, and how its answers are classified."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shared.bus.effects import Outcome, ServiceDeclaration
from shared.errors import EffectInProgress, EffectKeyConflict, ProviderUnavailable

IN_PROGRESS = 409
"""The status most providers answer while a call under the same key is still running."""
KEY_REUSED = 422
"""The status most providers answer for a key already used with another body."""
TOO_MANY_REQUESTS = 429


@dataclass(frozen=True)
class ProviderAnswer:
    status: int
    body: dict[str, Any]


class Provider(Protocol):
    """One declared service. ``call`` sends ``body`` to ``operation`` under the idempotency
    ``key``; a refused connection, a dropped one or a timeout raises ProviderUnavailable."""

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer: ...


def outcome_of(answer: ProviderAnswer, service: ServiceDeclaration) -> Outcome:
    """``succeeded`` for 2xx and ``failed`` for a refusal that no retry changes (4xx); a
    status that leaves the outcome open (429, 5xx, anything else) raises ProviderUnavailable,
    to be retried with the same key. The service's declared statuses come first: "in
    progress" raises EffectInProgress (retried with the same key, like any unknown outcome),
    "key reused" raises EffectKeyConflict (parked: the bus sends one body per key)."""
    if 200 <= answer.status < 300:
        return "succeeded"
    if answer.status in service.in_progress_statuses:
        raise EffectInProgress(
            f"the provider answered {answer.status}: a call under this key is still in progress"
        )
    if answer.status in service.key_reused_statuses:
        raise EffectKeyConflict(
            f"the provider answered {answer.status}: the idempotency key was used with another body"
        )
    if 400 <= answer.status < 500 and answer.status != TOO_MANY_REQUESTS:
        return "failed"
    raise ProviderUnavailable(f"the provider answered {answer.status}")
