"""``bus verify`` on an app that declares a service: its performer retries as the runtime's
does, so a provider's "in progress" answer (a call under the same key still running) is
retried with the same key and never reported as a lost message (issue 42)."""

from __future__ import annotations

from lab.sim.choices import DepthFirst
from lab.verify.engine import EXHAUSTIVE, Explorer
from lab.verify.inputs import declared_inputs
from lab.verify.world import Target
from shared.sample import app as sample


async def test_the_sample_app_passes_every_single_fault_of_its_provider_calls() -> None:
    """Every schedule with one fault and no deviation, counted: among them a call that lands
    after the performer gave up, whose retry or racing copy is answered 409 meanwhile."""
    app = sample.build_app()
    explorer = Explorer(Target(app, declared_inputs(app, sample.examples)))
    prefix: list[int] | None = []
    schedules = 0
    violations: list[str] = []
    while prefix is not None:
        chooser = DepthFirst(prefix, 0, 1)
        result = await explorer.run(EXHAUSTIVE, chooser)
        violations += [str(v) for v in result.violations]
        prefix = chooser.next_prefix()
        schedules += 1
    assert violations == []
    assert schedules > 400
