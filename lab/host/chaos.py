"""Faults an app can be started with on purpose, for the demo and soak runs: duplicated
signals and simulated crashes at random storage operations. Off unless its settings are set;
never set them in Azure.

- ``BUS_CHAOS_DUPLICATE_RATE``: probability (0-1) that a queue message is sent twice.
- ``BUS_CHAOS_CRASH_RATE``: probability (0-1) that a storage operation of a queue-triggered
  or HTTP invocation crashes it, before or after the operation is applied.
- ``BUS_CHAOS_SEED``: makes both reproducible.

With ``BUS_OUTCOME_LOG`` (``lab.local.outcome_log``) they are what the local host wraps
around the app's worker (``wrappers``, given to ``shared.runtime.wrap``); the deployed app
reads none of them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from lab.local.chaos import DuplicatingAccount
from lab.local.outcome_log import OutcomeLog
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.stores import SqlDatabase
from shared.errors import ConfigurationError
from shared.runtime import Wrappers
from shared.settings import Settings
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


def with_crashes(
    account: StorageAccount, sql: SqlDatabase | None, environ: Mapping[str, str]
) -> tuple[StorageAccount, SqlDatabase | None]:
    """``account`` and ``sql`` crashing at their operations as the settings ask, one crash
    plan for both (unchanged if not)."""
    rate = _rate(environ, CRASH_RATE)
    if rate <= 0:
        return account, sql
    instrumentation = Instrumentation(plan=crash_plan(rate, _seed(environ)))
    crashing = InstrumentedAccount(account, instrumentation)
    return crashing, None if sql is None else InstrumentedSql(sql, instrumentation)


def wrappers(settings: Settings) -> Wrappers | None:
    """What the settings ask the local host to wrap around the app's worker: duplicated
    signals on its account, crashes on its bus's account and database, its outcomes in the
    outcome log. None when they ask for nothing."""
    environ = settings.values
    log = OutcomeLog.from_settings(settings)
    if _rate(environ, DUPLICATE_RATE) <= 0 and _rate(environ, CRASH_RATE) <= 0 and log is None:
        return None
    return Wrappers(
        account=lambda account: with_duplicates(account, environ),
        bus=lambda account, sql: with_crashes(account, sql, environ),
        outcome=None if log is None else log.record,
    )


def _seed(environ: Mapping[str, str]) -> int:
    try:
        return int(environ.get(SEED, "0") or 0)
    except ValueError:
        raise ConfigurationError(f"{SEED} must be a whole number") from None
