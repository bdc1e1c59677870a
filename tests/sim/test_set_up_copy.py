"""A run on a copy of a set-up account (``explore.set_up``) is the run that sets up its own."""

from __future__ import annotations

import pytest

from lab.sim.choices import Replay, Seeded
from lab.sim.explore import CONFIGS, reference_for, set_up, simulate
from lab.sim.world import RunResult, SimConfig, World, quiet_logs
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount

CONFIGURATIONS = [
    "small",  # initial sends and extra copies queued by setup
    "small-ingress",  # scheduled client sends: setup only provisions and subscribes
    "small-retry",  # a chain with a retry policy
    "small-partition-postgres-state_based",  # rows in SQL, three messages
    "small-sweep-processed_messages",
    "small-sweep-cosmos",  # rows in the Cosmos DB model, copied with the account
    "small-partition-blob-state_based",  # rows in blob documents of the account
]


async def _own_setup(config: SimConfig, seed: int) -> RunResult:
    clock = ManualClock()
    world = World(config, _chooser(seed), MemoryStorageAccount(clock=clock), clock)
    with quiet_logs():
        return await world.run(await reference_for(config))


def _chooser(seed: int) -> Seeded:
    return Seeded(seed, max_faults=2, fault_rate=0.1)


@pytest.mark.parametrize("name", CONFIGURATIONS)
async def test_a_run_on_a_copied_setup_is_the_run_with_its_own_setup(name: str) -> None:
    config = CONFIGS[name]
    for seed in range(12):
        own = await _own_setup(config, seed)
        copied = await simulate(config, _chooser(seed))

        assert copied.trace == own.trace
        assert copied.decisions == own.decisions
        assert copied.faults == own.faults
        assert copied.fingerprint == own.fingerprint
        assert copied.observation == own.observation
        assert [str(v) for v in copied.violations] == [str(v) for v in own.violations]


async def test_runs_do_not_change_the_set_up_account_they_copy() -> None:
    config = CONFIGS["small"]
    template, _ = await set_up(config)
    queued = [m.content for m in await template.queue("first").peek(32)]
    for seed in range(5):
        await simulate(config, _chooser(seed))

    assert [m.content for m in await template.queue("first").peek(32)] == queued
    assert len(queued) == config.copies


async def test_a_world_given_what_setup_left_draws_next_what_the_set_up_world_would() -> None:
    config = CONFIGS["small"]
    template, prepared = await set_up(config)
    clock = ManualClock()
    original = World(config, Replay([]), MemoryStorageAccount(clock=clock), clock)
    await original.setup()
    clock = ManualClock()
    copied = World(config, Replay([]), template.copy(clock), clock, prepared=prepared)

    assert prepared.ids  # the client's sends drew ids outside any process
    assert copied.ids() == original.ids()
    assert copied.bus_config.jitter.random() == original.bus_config.jitter.random()
