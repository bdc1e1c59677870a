"""A client's cancel (``bus cancel``, the HTTP ingress): by the idempotency key the message was
sent with. The key's ingress record, in the client's own scope, names the token of each
message the send created; each is cancelled at its endpoint by ``shared.bus.cancel``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.bus.bus import Bus
from shared.bus.cancel import Canceller, CancelResult, Target
from shared.bus.ingress import recorded_signals
from shared.errors import CancelRefused

MIXED = "mixed"
"""The answer for a publish whose messages did not all end alike."""


@dataclass(frozen=True)
class CancelReceipt:
    """What became of each message a key's send created."""

    idempotency_key: str
    results: dict[str, CancelResult]
    """Message id -> its answer, in the record's order."""

    @property
    def outcome(self) -> str:
        """``cancelled``, ``processed`` or ``not_found`` when every message answered so
        (a command has one; a publish nobody subscribed to sent none: ``not_found``), else
        ``mixed``."""
        answers = {r.value for r in self.results.values()} or {CancelResult.NOT_FOUND.value}
        return answers.pop() if len(answers) == 1 else MIXED

    def as_json(self) -> dict[str, Any]:
        """What the HTTP ingress answers and ``bus cancel`` prints."""
        return {
            "idempotency_key": self.idempotency_key,
            "outcome": self.outcome,
            "messages": {m: r.value for m, r in self.results.items()},
        }


async def cancel_by_key(
    bus: Bus, key: str, *, sender: str, scope: str | None = None, legacy: bool = True
) -> CancelReceipt | None:
    """Cancel what ``key`` sent in ``scope`` (default: ``sender``); None when the scope has
    no such key. CancelRefused, before anything is written, when a message went to an
    endpoint that is not this app's or not in token mode."""
    client = bus.client(sender, scope=scope, legacy=legacy)
    record = await client.recorded(key)
    if record is None:
        return None
    signals = recorded_signals(record)
    cancellers = [_canceller(bus, s.destination) for s in signals]  # all checked first
    source = str(record.get("sender", ""))
    results: dict[str, CancelResult] = {}
    for signal, canceller in zip(signals, cancellers, strict=True):
        target = Target(signal.partition_key, signal.message_id, source)
        results[signal.message_id] = await canceller.cancel(signal.token, target)
    return CancelReceipt(key, results)


def _canceller(bus: Bus, destination: str) -> Canceller:
    if destination not in bus.app.endpoints:
        raise CancelRefused(
            f"the message went to {destination}, which is no endpoint of this app: only "
            "messages to the app's own token-mode endpoints can be cancelled"
        )
    return Canceller.of(bus.receiver(destination))
