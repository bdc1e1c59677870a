"""``bus verify`` from a test: ``assert_verified(app)`` explores the app as the command does
and fails the test with every violation, the seed that replays it and the nondeterministic
handlers it named::

    from lab.verify.testing import assert_verified
    from myapp import app, examples

    def test_my_app_survives_faults_and_duplicates() -> None:
        assert_verified(app, examples=examples, budget=20)

``schedules=N`` explores a fixed number of schedules instead (or stops at whichever of the
two comes first): a test on a loaded machine then explores what it does on a quiet one.

Synchronous, so that it runs in any test (it runs its own event loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from lab.verify.engine import Report, explore
from lab.verify.inputs import declared_inputs, generated_inputs
from lab.verify.world import Target
from shared.bus import BusApp

DEFAULT_BUDGET = 10.0


def verify(
    app: BusApp,
    *,
    examples: Sequence[object] | None = None,
    budget: float | None = DEFAULT_BUDGET,
    schedules: int | None = None,
    first_seed: int = 0,
) -> Report:
    """Explore ``app`` from ``examples`` (as a declaration, ``lab.verify.inputs``), or from
    messages generated from its models when None."""
    app.check()
    inputs = generated_inputs(app) if examples is None else declared_inputs(app, list(examples))
    return asyncio.run(
        explore(Target(app, inputs), budget=budget, schedules=schedules, first_seed=first_seed)
    )


def assert_verified(
    app: BusApp,
    *,
    examples: Sequence[object] | None = None,
    budget: float | None = DEFAULT_BUDGET,
    schedules: int | None = None,
    first_seed: int = 0,
) -> Report:
    """``verify``, failing with what it found; the report when nothing was."""
    report = verify(
        app, examples=examples, budget=budget, schedules=schedules, first_seed=first_seed
    )
    if not report.ok:
        raise AssertionError(describe(report))
    return report


def describe(report: Report) -> str:
    lines = [f"bus verify found {len(report.violations)} violating run(s):"]
    for found in report.violations[:5]:
        lines.append(f"  seed {found.seed}:")
        lines += [f"    {violation}" for violation in found.result.violations]
    lines += [
        f"  nondeterministic handler {handler} (seed {seed})"
        for handler, seed in sorted(report.nondeterministic.items())
    ]
    return "\n".join(lines)
