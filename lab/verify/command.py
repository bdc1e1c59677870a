"""``bus verify``: explore the user's app under the simulator and report what breaks.

Lives in the lab beside the simulator it drives; ``shared.cli`` imports it only when the
command runs, so the deployed app never loads the lab (``tests/test_deployed_app.py``).

Exit codes: 0 no violation; 1 a violation (each printed with the seed that replays it);
2 bad usage (a seed that does not parse, examples that cannot be used, a model that cannot
be generated); 3 an app that cannot be loaded, as for every ``bus`` command.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TextIO

from lab.sim.world import RunResult
from lab.verify.engine import Explorer, Report, explore
from lab.verify.inputs import (
    Input,
    app_module,
    describe_inputs,
    found_inputs,
    generated_inputs,
)
from lab.verify.world import Target
from shared.bus import BusApp
from shared.logsafe import shown

MAX_SHOWN = 5
"""Violating runs printed in full; the rest are counted."""


def target_of(app: BusApp, app_reference: str | None, examples: str | None) -> Target:
    """The app and its inputs: declared, else generated (``lab.verify.inputs``)."""
    module = app_module(app_reference) if app_reference else None
    inputs: list[Input] = found_inputs(app, module, examples) or generated_inputs(app)
    return Target(app, inputs)


def run(args: argparse.Namespace, app: BusApp, app_reference: str | None, out: TextIO) -> int:
    """``bus verify``; configuration errors propagate to the CLI, which reports them."""
    target = target_of(app, app_reference, args.examples)
    print("verify: inputs", file=out)
    for line in describe_inputs(target.inputs):
        print(f"  {line}", file=out)
    replay = "bus verify" + (f" --app {app_reference}" if app_reference else "")
    replay += f" --examples {args.examples}" if args.examples else ""
    if args.seed is not None:
        result = asyncio.run(Explorer(target).replay(args.seed))
        print(_violation(f"{replay} --seed {args.seed}", result, trace=True), file=out)
        return 0 if result.ok else 1
    report = asyncio.run(
        explore(
            target,
            budget=args.budget,
            schedules=args.schedules,
            first_seed=args.first_seed,
            stop_at_first=args.stop_at_first,
        )
    )
    _print_report(report, out, replay=replay, trace=args.trace, stats=args.stats)
    return 0 if report.ok else 1


def _print_report(report: Report, out: TextIO, *, replay: str, trace: bool, stats: bool) -> None:
    for phase in report.phases:
        print(f"verify: {phase}", file=out)
    for found in report.violations[:MAX_SHOWN]:
        print(_violation(f"{replay} --seed {found.seed}", found.result, trace=trace), file=out)
    for invariant, (runs, seed) in sorted(_by_invariant(report).items()):
        print(f"verify: {invariant} broken in {runs} run(s), first seed {seed}", file=out)
    for handler, seed in sorted(report.nondeterministic.items()):
        print(f"verify: nondeterministic handler {handler} (seed {seed})", file=out)
    if stats:
        rate = report.schedules / report.seconds if report.seconds else 0.0
        print(
            f"verify: {report.schedules} schedules in {report.seconds:.1f} s "
            f"({rate:.0f} per second)",
            file=out,
        )
        if report.first_violation_after is not None:
            print(f"verify: first violation after {report.first_violation_after:.2f} s", file=out)
    verdict = "PASS" if report.ok else "FAIL"
    print(
        f"verify: {verdict} schedules={report.schedules} violations={len(report.violations)}",
        file=out,
    )


def _by_invariant(report: Report) -> dict[str, tuple[int, str]]:
    """Each broken invariant: in how many runs, and the first run's seed."""
    found: dict[str, tuple[int, str]] = {}
    for violating in report.violations:
        for invariant in {v.invariant for v in violating.result.violations}:
            runs, seed = found.get(invariant, (0, violating.seed))
            found[invariant] = (runs + 1, seed)
    return found


def _violation(command: str, result: RunResult, *, trace: bool) -> str:
    if result.ok:
        return f"verify: no violation in {command}"
    lines = [f"verify: violation, replay with: {command}"]
    lines += [f"  {shown(v, 2000)}" for v in result.violations]
    if trace:
        lines.append("  schedule:")
        lines += [f"    {shown(step)}" for step in result.trace]
    return "\n".join(lines)
