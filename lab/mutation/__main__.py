"""``python -m lab.mutation`` (``make mutate``): run every mutant against the protocol
tests and a bounded simulator run; print which are killed, which survive, and the score.

Each mutant is applied to a fresh copy of the repository (never to the working tree), and
the tests run there with that copy first on the import path. Long (about a minute per killed
mutant, several per survivor): not part of CI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lab.mutation.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
_SKIPPED_EVERYWHERE = shutil.ignore_patterns(
    ".git", ".venv*", "node_modules", "*_cache", "__pycache__", "*.egg-info"
)


def _skipped(folder: str, names: list[str]) -> set[str]:
    """What the mutant's copy leaves out: tools' folders anywhere, and the benches' results
    (``bench/`` at the top only: ``lab/bench/`` is code that tests import)."""
    skipped = set(_SKIPPED_EVERYWHERE(folder, names))
    if Path(folder) == ROOT and "bench" in names:
        skipped.add("bench")
    return skipped


PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider")
PROTOCOL_TESTS = ("tests/sim", "tests/bus", "tests/cleanup", "tests/contract", "tests/effects")
PROTOCOL_MARKS = "not slow and not azurite and not spark"


@dataclass(frozen=True)
class Commands:
    """The test command: pytest over ``tests``, then ``seconds`` of random simulation."""

    tests: tuple[str, ...] = PROTOCOL_TESTS
    seconds: float = 30.0

    @property
    def pytest(self) -> tuple[str, ...]:
        return (*PYTEST, "-m", PROTOCOL_MARKS, *self.tests)

    def first(self, mutant: Mutant) -> tuple[str, ...] | None:
        """Pytest over the tests known to kill ``mutant``, or None when none are named."""
        if not mutant.first:
            return None
        return (*PYTEST, "-m", PROTOCOL_MARKS, *mutant.first)

    @property
    def simulator(self) -> tuple[str, ...] | None:
        if self.seconds <= 0:
            return None
        return ("-m", "lab.sim", "--random", "--budget", str(self.seconds), "--jobs", "1")


@dataclass(frozen=True)
class Verdict:
    mutant: Mutant
    killed_by: str
    """'tests', 'simulator', 'timeout', or '' for a survivor."""
    seconds: float


def apply(mutant: Mutant, root: Path) -> None:
    path = root / mutant.path
    text = path.read_text()
    if text.count(mutant.original) != 1:
        raise SystemExit(
            f"mutant {mutant.id}: its original text occurs {text.count(mutant.original)} "
            f"times in {mutant.path} (the code changed: update lab/mutation/mutants.py)"
        )
    path.write_text(text.replace(mutant.original, mutant.replacement))


def passes(command: tuple[str, ...], root: Path, timeout: float) -> bool:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, *command],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
    return done.returncode == 0


def judge(mutant: Mutant, commands: Commands, timeout: float) -> Verdict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-") as folder:
        root = Path(folder) / "repo"
        shutil.copytree(ROOT, root, ignore=_skipped)
        apply(mutant, root)
        killed_by = ""
        try:
            simulator, first = commands.simulator, commands.first(mutant)
            # The known killers first only bring the verdict sooner; the whole command decides.
            killed_first = first is not None and not passes(first, root, timeout)
            if killed_first or not passes(commands.pytest, root, timeout):
                killed_by = "tests"
            elif simulator is not None and not passes(simulator, root, timeout):
                killed_by = "simulator"
        except subprocess.TimeoutExpired:
            killed_by = "timeout"
    return Verdict(mutant, killed_by, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.mutation")
    parser.add_argument("--only", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--check", action="store_true", help="only check every mutant applies")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    parser.add_argument(
        "--tests", nargs="*", default=list(PROTOCOL_TESTS), help="test paths (default: protocol)"
    )
    parser.add_argument(
        "--simulator-seconds", type=float, default=30.0, help="random simulation (0: none)"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the run on the unmutated copy"
    )
    args = parser.parse_args(argv)
    commands = Commands(tuple(args.tests), args.simulator_seconds)
    chosen = [m for m in MUTANTS if not args.only or m.id in args.only]
    if args.check:
        for mutant in chosen:
            text = (ROOT / mutant.path).read_text()
            print(f"{mutant.id}: original found {text.count(mutant.original)} time(s)")
        return 0 if all((ROOT / m.path).read_text().count(m.original) == 1 for m in chosen) else 1
    unmutated = Mutant("none", "pyproject.toml", "[project]", "[project]", "none")
    baseline = None if args.no_baseline else judge(unmutated, commands, args.timeout)
    if baseline is not None and baseline.killed_by:
        print(
            f"the unmutated code fails its own test command ({baseline.killed_by}): fix that first"
        )
        return 2
    if baseline is not None:
        print(f"unmutated: passes in {baseline.seconds:.0f}s", flush=True)
    verdicts = []
    for mutant in chosen:
        verdict = judge(mutant, commands, args.timeout)
        verdicts.append(verdict)
        status = f"killed by {verdict.killed_by}" if verdict.killed_by else "SURVIVED"
        note = f" (equivalent: {mutant.equivalent})" if mutant.equivalent else ""
        print(f"{mutant.id}: {status} in {verdict.seconds:.0f}s{note}", flush=True)
    killed = sum(1 for v in verdicts if v.killed_by)
    unexplained = [v for v in verdicts if not v.killed_by and not v.mutant.equivalent]
    counted = len(verdicts) - sum(1 for v in verdicts if not v.killed_by and v.mutant.equivalent)
    print(
        f"mutation: mutants={len(verdicts)} killed={killed} "
        f"equivalent={len(verdicts) - killed - len(unexplained)} survived={len(unexplained)} "
        f"score={killed}/{counted}"
    )
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
