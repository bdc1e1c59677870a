"""``bus verify`` as a user runs it: a real subprocess of the ``bus`` command line, its output
and its exit codes (0 no violation, 1 a violation, 2 bad usage or inputs, 3 an app that
cannot be loaded)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def bus(*args: str) -> subprocess.CompletedProcess[str]:
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("BUS_", "AzureWebJobsStorage", "PYTEST_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "shared.cli", "verify", *args],
        cwd=REPO_ROOT,
        env={**inherited, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_the_sample_app_passes() -> None:
    result = bus("--budget", "200", "--schedules", "40")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "m1: PlaceOrder to orders" in result.stdout  # the sample's declared examples
    assert "verify: PASS schedules=40 violations=0" in result.stdout


def test_a_clock_reading_handler_fails_with_a_seed_that_replays() -> None:
    result = bus("--app", "tests.verify.apps:clock_app", "--schedules", "2000", "--stop-at-first")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "DeterministicHandler: tickets: handler stamp_with_clock" in result.stdout
    named = "verify: nondeterministic handler tickets: stamp_with_clock (seed "
    assert named in result.stdout
    seed = result.stdout.split(named, 1)[1].split(")", 1)[0]
    replayed = bus("--app", "tests.verify.apps:clock_app", "--seed", seed)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "DeterministicHandler" in replayed.stdout
    assert "schedule:" in replayed.stdout


def test_usage_and_inputs_it_cannot_use_exit_2() -> None:
    opaque = bus("--app", "tests.verify.opaque_app:app", "--examples", "tests.verify.apps:none")
    assert opaque.returncode == 2
    assert "has no attribute 'none'" in opaque.stderr
    generated = bus("--app", "tests.verify.opaque_app:app")
    assert generated.returncode == 2
    assert "cannot generate Connect" in generated.stderr
    assert "declare examples" in generated.stderr
    assert bus("--budget", "0").returncode == 2
    assert bus("--schedules", "0").returncode == 2
    bad_seed = bus("--seed", "nonsense")
    assert bad_seed.returncode == 2
    assert "expected verify:<decisions>" in bad_seed.stderr


def test_an_app_it_cannot_load_exits_3() -> None:
    result = bus("--app", "tests.verify.apps:missing")
    assert result.returncode == 3
    assert "has no attribute 'missing'" in result.stderr
