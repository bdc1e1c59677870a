"""Faults an app can be started with on purpose, for the demo and soak runs: duplicated
signals and simulated crashes at random storage operations. Off unless its settings are set;
never set them in Azure.

- ``BUS_CHAOS_DUPLICATE_RATE``: probability (0-1) that a queue message is sent twice.
- ``BUS_CHAOS_CRASH_RATE``: probability (0-1) that a storage operation of a queue-triggered
  or HTTP invocation crashes it, before or after the operation is applied.
- ``BUS_CHAOS_SEED``: makes both reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from shared.errors import ConfigurationError
from shared.local.chaos import DuplicatingAccount
from shared.stores.account import StorageAccount
from shared.stores.instrumented import (
    Fault,
    FaultPlan,
    Instrumentation,
    InstrumentedAccount,
    Operation,
)

DUPLICATE_RATE = "BUS_CHAOS_DUPLICATE_RATE"
CRASH_RATE = "BUS_CHAOS_CRASH_RATE"
SEED = "BUS_CHAOS_SEED"


def crash_plan(rate: float, seed: int) -> FaultPlan:
    """Crash before or after a random ``rate`` of storage operations, reproducibly."""
    chooser = random.Random(seed)

    def plan(operation: Operation) -> Fault | None:
        if chooser.random() < rate:
            return chooser.choice([Fault.CRASH_BEFORE, Fault.CRASH_AFTER])
        return None

    return plan


def _rate(environ: Mapping[str, str], name: str) -> float:
    text = environ.get(name, "").strip()
    if not text:
        return 0.0
    try:
        rate = float(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= rate <= 1.0:
        raise ConfigurationError(f"{name} must be between 0 and 1, got {rate}")
    return rate


def with_duplicates(account: StorageAccount, environ: Mapping[str, str]) -> StorageAccount:
    """``account`` sending duplicate queue messages as the settings ask (unchanged if not)."""
    rate = _rate(environ, DUPLICATE_RATE)
    return DuplicatingAccount(account, rate, _seed(environ)) if rate > 0 else account


def with_crashes(account: StorageAccount, environ: Mapping[str, str]) -> StorageAccount:
    """``account`` crashing at storage operations as the settings ask (unchanged if not)."""
    rate = _rate(environ, CRASH_RATE)
    if rate <= 0:
        return account
    return InstrumentedAccount(account, Instrumentation(plan=crash_plan(rate, _seed(environ))))


def _seed(environ: Mapping[str, str]) -> int:
    try:
        return int(environ.get(SEED, "0") or 0)
    except ValueError:
        raise ConfigurationError(f"{SEED} must be a whole number") from None
