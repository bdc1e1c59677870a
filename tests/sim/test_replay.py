"""Seeds replay exactly, and bad seeds are refused with a clear error."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from lab.sim.__main__ import main
from lab.sim.explore import CONFIGS, exhaustive, exhaustive_seed, random_search, replay
from lab.sim.variants import DELETE_BEFORE_SEND
from shared.errors import ConfigurationError


async def test_a_random_seed_replays_the_same_schedule() -> None:
    first = await replay("7")
    again = await replay("7")

    assert first.trace == again.trace
    assert first.decisions == again.decisions
    assert len(first.trace) > 20


async def test_random_search_over_larger_configurations_keeps_every_invariant() -> None:
    summary = await random_search(range(40))

    assert summary.schedules == 40
    assert summary.violations == 0, summary.failures[:1]
    assert summary.faults > 0


async def test_the_seed_a_violation_prints_replays_that_violation() -> None:
    summary = await exhaustive(
        CONFIGS["small"],
        max_deviations=0,
        max_faults=1,
        variant=DELETE_BEFORE_SEND,
        stop_at_first=True,
    )
    [(seed, found)] = summary.failures
    assert seed == exhaustive_seed(found.config, found.decisions)

    again = await replay(seed, DELETE_BEFORE_SEND)

    assert again.trace == found.trace
    assert [str(v) for v in again.violations] == [str(v) for v in found.violations]


@pytest.mark.parametrize("seed", ["nope", "small:1.x", "unknown:0.1", "small@x"])
async def test_a_malformed_seed_is_refused(seed: str) -> None:
    with pytest.raises(ConfigurationError):
        await replay(seed)


def test_the_command_line_replays_a_seed_and_ends_with_the_summary_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = asyncio.run(
        exhaustive(
            CONFIGS["small"],
            max_deviations=0,
            max_faults=1,
            variant=DELETE_BEFORE_SEND,
            stop_at_first=True,
        )
    )
    [(seed, _)] = found.failures
    capsys.readouterr()

    assert main(["--seed", seed, "--variant", "delete-before-send"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"violation in small, replay with: make simulate SEED={seed}"
    assert out[-1] == "simulation: schedules=1 faults=1 violations=1"

    assert main(["--seed", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("violations=0")
    assert main(["--seed", "nonsense"]) == 2


@pytest.mark.parametrize(
    "seed",
    [
        "11",
        # A cleanup pass that reads the origins of two tokens: their reads once came in the
        # order of a set of strings, so hash seeds 0 and 1 gave two different schedules.
        "2776",
    ],
)
def test_a_seed_replays_identically_in_another_process_with_another_hash_seed(seed: str) -> None:
    """Nothing in a run may depend on Python's per-process string hashing."""
    outputs = []
    for hash_seed in ("0", "1"):
        done = subprocess.run(
            [sys.executable, "-m", "lab.sim", "--seed", seed, "--verbose"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            timeout=120,
        )
        outputs.append(done.stdout)

    assert outputs[0] == outputs[1]
    assert outputs[0].count("\n") > 20
