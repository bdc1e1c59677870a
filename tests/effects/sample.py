"""The sample app with a performer calling a provider (kept in memory, or over HTTP), on
in-memory stores."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.bus import BusApp, RetryPolicy
from shared.clock import ManualClock
from shared.effects.memory import DECLINE_FIELD, InMemoryProvider
from shared.effects.performer import add_performer
from shared.effects.provider import Provider, ProviderAnswer
from shared.sample.app import build_app
from shared.sample.charges import PROVIDER
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend


@dataclass
class DecliningProvider(InMemoryProvider):
    """Declines the cards of the orders in ``declined`` (as a test card number would)."""

    declined: set[str] = field(default_factory=set)

    def apply(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        if operation == "charge" and body.get("order") in self.declined:
            body = {**body, DECLINE_FIELD: True}
        return super().apply(operation, body, key)


def sample_with(provider: Provider) -> BusApp:
    """A fresh sample app whose performer calls ``provider``."""
    app = build_app()
    add_performer(app, {PROVIDER: provider}, call_timeout=5.0, retry=RetryPolicy(immediate=3))
    return app


async def sample_harness(provider: Provider) -> Harness:
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    return await Harness.create(backend, sample_with(provider), jitter=random.Random(7))
