"""The app's state store down for a span of the run in the simulator (``small-state-outage``):
its first requests time out, for more deliveries than the host's tries. Every message waits
for the store without spending a try and is processed once; a failure table that counts the
outage against the host's tries parks the message (NoLostMessages)."""

from __future__ import annotations

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.explore import CONFIGS, exhaustive
from lab.sim.invariants import NO_LOST_MESSAGES
from lab.sim.variants import STATE_OUTAGE_SPENDS_TRIES

CONFIG = CONFIGS["small-state-outage"]


def test_the_default_simulation_explores_an_outage_longer_than_the_hosts_tries() -> None:
    planned = {(name, d, f) for plan in DEFAULT_PLAN for name, d, f in plan}

    assert {("small-state-outage", 1, 0), ("small-state-outage", 0, 1)} <= planned
    assert CONFIG.state_outage > CONFIG.max_dequeue_count


async def test_every_single_fault_during_a_state_outage_loses_and_parks_nothing() -> None:
    summary = await exhaustive(CONFIG, max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 50


async def test_one_deviation_during_a_state_outage_loses_and_parks_nothing() -> None:
    summary = await exhaustive(CONFIG, max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 10


async def test_an_outage_counted_against_the_hosts_tries_parks_the_message() -> None:
    summary = await exhaustive(
        CONFIG,
        max_deviations=0,
        max_faults=0,
        variant=STATE_OUTAGE_SPENDS_TRIES,
        stop_at_first=True,
    )

    assert summary.violations == 1
    [(_, result)] = summary.failures
    assert NO_LOST_MESSAGES in {v.invariant for v in result.violations}
