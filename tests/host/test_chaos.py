"""The local host's faults and outcome log reach the app's worker through ``Wrappers``: the
settings that ask for them make the wrappers, the worker applies them where they belong, and
without those settings nothing is wrapped."""

from __future__ import annotations

import json
from pathlib import Path

from lab.host import chaos
from lab.local.chaos import DuplicatingAccount
from lab.local.outcome_log import OUTCOME_LOG_SETTING
from shared import runtime
from shared.bus import Outcome
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.provisioning import provision
from shared.sample.app import app as sample_app
from shared.settings import Settings
from shared.stores.instrumented import InstrumentedAccount
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import sample_settings


def settings(**values: str) -> Settings:
    return Settings(values, dict.fromkeys(values, "environment"))


def test_no_fault_and_no_outcome_log_wrap_nothing() -> None:
    assert chaos.wrappers(settings()) is None
    assert chaos.wrappers(settings(**{chaos.CRASH_RATE: "0", chaos.DUPLICATE_RATE: ""})) is None


async def test_the_worker_duplicates_on_its_account_and_crashes_on_its_bus_only(
    tmp_path: Path,
) -> None:
    log = tmp_path / "outcomes.jsonl"
    wrappers = chaos.wrappers(
        settings(
            **{
                chaos.DUPLICATE_RATE: "0.5",
                chaos.CRASH_RATE: "0.01",
                chaos.SEED: "3",
                OUTCOME_LOG_SETTING: str(log),
            }
        )
    )
    assert wrappers is not None
    raw = MemoryStorageAccount()
    worker = runtime.Worker(sample_app, sample_settings(), raw, wrappers=wrappers)
    account = worker.account()
    assert isinstance(account, DuplicatingAccount)
    assert account.inner is raw
    bus = worker.bus()
    assert isinstance(bus.account, InstrumentedAccount)
    assert bus.account.inner is account
    assert worker.bus() is bus  # one bus, for queue-triggered and HTTP invocations alike

    await provision(raw, worker.resources)
    assert await worker.receive("orders", b"not json", 1) is Outcome.POISONED
    lines = log.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"endpoint": "orders", "outcome": "poisoned"}]


def test_crashes_reach_the_database_through_the_same_plan() -> None:
    account, sql = chaos.with_crashes(
        MemoryStorageAccount(), MemorySqlDatabase(), {chaos.CRASH_RATE: "0.5"}
    )
    assert isinstance(account, InstrumentedAccount)
    assert isinstance(sql, InstrumentedSql)
    assert sql.instrumentation is account.instrumentation
    untouched = MemoryStorageAccount()
    assert chaos.with_crashes(untouched, None, {}) == (untouched, None)


def test_an_unwrapped_worker_uses_its_account_as_given() -> None:
    raw = MemoryStorageAccount()
    worker = runtime.Worker(sample_app, sample_settings(), raw)
    assert worker.account() is raw
    assert worker.bus().account is raw
