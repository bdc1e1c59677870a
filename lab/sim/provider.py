"""The payment provider as the simulator runs it (``docs/effects.md``, section 8).

Each call is an operation of the calling process (kind ``provider.call``), scheduled and
faulted like a storage request: a crash before or after it, an error before it (nothing
applied) or after it (applied, the answer lost), and a call that times out and lands later,
after the performer gave up. The provider behind it keeps its idempotency keys and a ledger.

A call held that way is one the provider has taken and is still working on: until it lands,
another call under its key (a retry, a racing copy) is answered 409, "in progress", and
applies nothing, as Stripe does. Whoever gets that answer must retry with the same key.

At the moment a call is applied, it also notes whether the round that requested the effect
had committed by then: an effect applied for a round that had not committed is what the
protocol must never do (EffectsAppliedOnce), even when that round commits later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.sim.model import Journal
from shared.bus.ids import derived_id
from shared.bus.records import STATE_ROW
from shared.bus.state.rows import TableRows
from shared.effects.memory import IN_PROGRESS_ANSWER, InMemoryProvider
from shared.effects.provider import ProviderAnswer
from shared.errors import OutcomeUnknown, ProviderUnavailable
from shared.stores.account import StorageAccount
from shared.stores.instrumented import Instrumentation

SERVICE = "payments"


@dataclass
class ScheduledProvider:
    """``requester``: the endpoint whose journal lists the keys of committed requests, read
    from ``account`` without being scheduled (None: an app without journals, whose calls are
    not judged against its commits). ``attempt_keys`` (a known-bad variant): every
    call is sent under a key of its own, as if derived from an attempt."""

    instrumentation: Instrumentation
    account: StorageAccount
    requester: str | None
    attempt_keys: bool = False
    provider: InMemoryProvider = field(default_factory=InMemoryProvider)
    uncommitted: list[str] = field(default_factory=list)
    """Keys applied while the round that requested them had not committed."""
    in_progress: int = 0
    """Calls answered 409: another call under their key was still held."""
    _sent: int = 0

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        self._sent += 1
        sent_key = derived_id(key, "attempt", self._sent) if self.attempt_keys else key
        try:
            return await self.instrumentation.run(
                "provider.call",
                f"{SERVICE}/{key}",
                lambda: self._apply(operation, body, key, sent_key),
            )
        except OutcomeUnknown as e:
            raise ProviderUnavailable(str(e)) from None

    async def _apply(
        self, operation: str, body: Mapping[str, Any], key: str, sent_key: str
    ) -> ProviderAnswer:
        if self._still_working(key, sent_key):
            self.in_progress += 1
            return IN_PROGRESS_ANSWER
        if self.requester is not None and key not in await self._committed_keys(self.requester):
            self.uncommitted.append(key)
        return self.provider.apply(operation, body, sent_key)

    def _still_working(self, key: str, sent_key: str) -> bool:
        """Whether the provider is still working on another call under ``sent_key``: one held
        (taken, not landed yet). A held call is marked landed before it is applied, so it never
        finds itself. Held calls are named by the committed key, which is the key they were
        sent under unless every call gets a key of its own (then none is ever in progress)."""
        if not self.provider.honours_keys or sent_key != key:
            return False
        target = f"{SERVICE}/{key}"
        return any(
            not h.landed and h.operation.kind == "provider.call" and h.operation.target == target
            for h in self.instrumentation.held
        )

    async def _committed_keys(self, requester: str) -> set[str]:
        keys: set[str] = set()
        async for entity in TableRows(self.account.table(requester)).every():
            if entity.row_key == STATE_ROW:
                journal = Journal.model_validate_json(str(entity["data"]))
                keys.update(k for entry in journal.applied for k in entry.effects)
        return keys

    def ledger(self) -> list[tuple[str, str]]:
        """(key, order) of every charge the provider applied, in order."""
        return [(e.key, str(e.body.get("order"))) for e in self.provider.ledger]
