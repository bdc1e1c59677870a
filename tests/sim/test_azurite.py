"""The simulator's scheduler and fault injector around the Azure stores, against Azurite:
concurrent copies interleaved at every storage operation, and crashes at every operation.

Time cannot be moved on Azurite, so leases are one second and time passes for real."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from lab.local.azurite import AzuriteEndpoints
from lab.sim.choices import Chooser, DepthFirst, Replay
from lab.sim.explore import Summary, exhaustive_seed, simulate
from lab.sim.world import RunResult, SimConfig, World, quiet_logs, reference_run
from shared.clock import ManualClock
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import Fault
from shared.stores.memory import MemoryStorageAccount

pytestmark = pytest.mark.azurite

AZURITE_SMALL = SimConfig(
    name="azurite-small",
    shape="single",
    copies=2,
    concurrency=2,
    faults=(Fault.CRASH_BEFORE, Fault.CRASH_AFTER),
    lease=2.0,
)
"""Crashes need the lease to run out before the message comes back: two seconds, for real."""
NO_FAULTS = replace(AZURITE_SMALL, name="azurite-copies", faults=(), lease=30.0)
"""Without crashes nothing waits for a lease, and a long one keeps a slow run's message
hidden, so each schedule's choices are the same as on the in-memory stores."""


@pytest.fixture
async def account(azurite: AzuriteEndpoints) -> AsyncIterator[AzureStorageAccount]:
    account = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    try:
        yield account
    finally:
        await account.close()


async def run_on_azurite(
    account: AzureStorageAccount, config: SimConfig, chooser: Chooser
) -> RunResult:
    """One run on freshly named queues, tables and containers."""
    suffix = uuid.uuid4().hex[:10]
    clock = ManualClock()
    reference = await reference_run(config, MemoryStorageAccount(clock=clock), clock, suffix)
    world = World(config, chooser, account, None, suffix)
    with quiet_logs():
        return await world.run(reference)


async def explore(account: AzureStorageAccount, *, deviations: int, faults: int) -> Summary:
    """Depth-first over Azurite (crash runs wait for real leases: slow)."""
    summary = Summary()
    prefix: list[int] | None = []
    while prefix is not None:
        chooser = DepthFirst(prefix, deviations, faults)
        result = await run_on_azurite(account, AZURITE_SMALL, chooser)
        summary.add(exhaustive_seed(AZURITE_SMALL, result.decisions), result)
        prefix = chooser.next_prefix()
    return summary


async def test_concurrent_copies_interleaved_on_azurite_keep_every_invariant(
    account: AzureStorageAccount,
) -> None:
    """Schedules found in memory (the second copy starting at points spread over the first
    copy's run) replayed on Azurite, decision for decision."""
    schedules = []
    prefix: list[int] | None = []
    while prefix is not None:
        chooser = DepthFirst(prefix, 1, 0)
        found = await simulate(NO_FAULTS, chooser)
        if not any("time passes" in step for step in found.trace):  # no real 31 s waits
            schedules.append(found.decisions)
        prefix = chooser.next_prefix()
    assert len(schedules) > 15

    for decisions in schedules[::5]:
        result = await run_on_azurite(account, NO_FAULTS, Replay(decisions))

        assert result.decisions == decisions, "the schedule diverged from the in-memory one"
        assert result.ok, result.violations


@pytest.mark.slow
async def test_every_interleaving_with_one_deviation_on_azurite(
    account: AzureStorageAccount,
) -> None:
    summary = await explore(account, deviations=1, faults=0)

    assert summary.schedules > 30
    assert summary.violations == 0, summary.failures[:1]


@pytest.mark.slow
async def test_a_crash_at_every_operation_on_azurite_keeps_every_invariant(
    account: AzureStorageAccount,
) -> None:
    summary = await explore(account, deviations=0, faults=1)

    # Crash before each of ~24 operations, and after each write.
    assert summary.schedules > 30
    assert summary.violations == 0, summary.failures[:1]
