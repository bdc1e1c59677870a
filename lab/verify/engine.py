"""The exploration ``bus verify`` runs over a user's app: bounded exhaustive search, then
seeded random search for the rest of a budget, every run checked against the fault-free run
of the same messages. The budget is a time (``--budget`` seconds), a number of schedules, or
both (whichever ends first): a test gives a count, so that what it explores does not depend
on how loaded the machine is.

Seeds (``--seed``) replay one run exactly:
- ``verify:<d>.<d>...``: a run of the exhaustive configuration given its decisions;
- ``verify-random@<n>``: random decisions drawn from ``n`` over the random configuration.

The exhaustive phases (``PHASES``) go from the cheapest bound up: every schedule with one
deviation and no fault, every single fault without a deviation, then one deviation with one
fault. They get at most ``EXHAUSTIVE_SHARE`` of the budget, of its time and of its count (a
phase cut short says so); random search gets what is left, and at least ``MIN_RANDOM_RUNS``
runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lab.sim.choices import Chooser, DepthFirst, Replay, Seeded
from lab.sim.variants import Variant
from lab.sim.world import Prepared, RunResult, SimConfig, quiet_logs
from lab.verify.checks import Outcome
from lab.verify.observed import Recorder
from lab.verify.world import AppWorld, Target
from shared.clock import ManualClock
from shared.errors import ConfigurationError
from shared.stores.memory import MemoryStorageAccount

EXHAUSTIVE = "verify"
RANDOM = "verify-random"
PHASES: tuple[tuple[int, int], ...] = ((1, 0), (0, 1), (1, 1))
"""(deviations, faults) of each exhaustive phase, in order."""
MIN_RANDOM_RUNS = 20
EXHAUSTIVE_SHARE = 0.5
"""Random runs reach deeper schedules (more faults, cleanup passes, duplicates) than the
bounded phases: they keep at least the other half of the budget."""
RANDOM_FAULTS = 3
RANDOM_FAULT_RATE = 0.05


@dataclass
class Found:
    seed: str
    result: RunResult


@dataclass
class Report:
    """What an exploration found."""

    schedules: int = 0
    seconds: float = 0.0
    """Wall-clock time of the exploration."""
    phases: list[str] = field(default_factory=list)
    violations: list[Found] = field(default_factory=list)
    nondeterministic: dict[str, str] = field(default_factory=dict)
    """``endpoint: handler`` -> the first seed that showed it."""
    first_violation_after: float | None = None
    """Seconds from the start to the first violating run."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, seed: str, result: RunResult, started: float, recorder: Recorder) -> None:
        self.schedules += 1
        for (endpoint, handler), found in recorder.found.items():
            if found.judged:
                self.nondeterministic.setdefault(f"{endpoint}: {handler}", seed)
        if result.ok:
            return
        if self.first_violation_after is None:
            self.first_violation_after = time.monotonic() - started
        self.violations.append(Found(seed, result))


@dataclass(frozen=True)
class Limit:
    """Where an exploration, or one share of it, ends: at ``deadline`` (monotonic seconds) or
    after ``schedules`` runs in all, whichever comes first; None is no bound."""

    deadline: float | None
    schedules: int | None

    @classmethod
    def of(cls, started: float, budget: float | None, schedules: int | None, share: float) -> Limit:
        if budget is None and schedules is None:
            raise ConfigurationError("an exploration needs a time budget or a number of schedules")
        if (budget is not None and budget <= 0) or (schedules is not None and schedules <= 0):
            raise ConfigurationError("an exploration's budget and schedules must be positive")
        return cls(
            None if budget is None else started + budget * share,
            None if schedules is None else max(1, int(schedules * share)),
        )

    def reached(self, report: Report) -> bool:
        if self.schedules is not None and report.schedules >= self.schedules:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline


class Explorer:
    """Runs ``target``'s schedules: each on a copy of an account set up once, against the
    fault-free run computed once."""

    def __init__(self, target: Target, variant: Variant | None = None) -> None:
        self.target = target
        self.variant = variant
        """A known-bad change of the pipeline (``lab.sim.variants``): what the invariants
        must catch in a user's app as they do in the model's."""
        self.configs = {
            EXHAUSTIVE: target.config(EXHAUSTIVE),
            RANDOM: replace(target.config(RANDOM, concurrency=3), sweeps=1, duplicates=1),
        }
        self._reference: Outcome | None = None
        self.last = Recorder()
        """The recorder of the latest run: what its handlers produced."""
        self._set_up: dict[str, tuple[MemoryStorageAccount, Prepared]] = {}

    async def reference(self) -> Outcome:
        """The messages processed one at a time, once each, without faults."""
        if self._reference is None:
            plain = replace(
                self.configs[EXHAUSTIVE], name="reference", copies=1, concurrency=1, faults=()
            )
            clock = ManualClock()
            world = AppWorld(
                self.target,
                plain,
                Replay([]),
                MemoryStorageAccount(clock=clock),
                clock,
                recorder=Recorder(),
            )
            with quiet_logs():
                result = await world.run(None)
            self._reference = world.outcome(result.observation)
        return self._reference

    async def run(self, name: str, chooser: Chooser) -> RunResult:
        config = self.configs[name]
        reference = await self.reference()
        template, prepared = await self._template(config)
        clock = ManualClock()
        world = AppWorld(
            self.target,
            config,
            chooser,
            template.copy(clock),
            clock,
            recorder=reference.recorder.copy(),
            prepared=prepared,
            wrap=None if self.variant is None else self.variant.wrap,
        )
        world.reference_outcome = reference
        self.last = world.recorder
        with quiet_logs():
            return await world.run(reference.observation)

    async def _template(self, config: SimConfig) -> tuple[MemoryStorageAccount, Prepared]:
        if config.name not in self._set_up:
            clock = ManualClock()
            account = MemoryStorageAccount(clock=clock)
            world = AppWorld(self.target, config, Replay([]), account, clock, recorder=Recorder())
            with quiet_logs():
                await world.setup()
            self._set_up[config.name] = (account, world.after_setup())
        return self._set_up[config.name]

    async def replay(self, seed: str) -> RunResult:
        """The one run ``seed`` names."""
        name, at, number = seed.partition("@")
        if at:
            if name != RANDOM or not number.isdigit():
                raise ConfigurationError(f"seed {seed!r}: expected {RANDOM}@<integer>")
            return await self.run(RANDOM, seeded(int(number)))
        name, colon, decisions = seed.partition(":")
        if name != EXHAUSTIVE or not colon:
            raise ConfigurationError(
                f"seed {seed!r}: expected {EXHAUSTIVE}:<decisions> or {RANDOM}@<integer>"
            )
        try:
            recorded = [] if decisions == "-" else [int(d) for d in decisions.split(".")]
        except ValueError:
            raise ConfigurationError(
                f"seed {seed!r}: decisions are dot-separated integers"
            ) from None
        try:
            return await self.run(EXHAUSTIVE, Replay(recorded))
        except ValueError as e:
            raise ConfigurationError(f"seed {seed!r} does not fit this app: {e}") from None


def seeded(number: int) -> Seeded:
    return Seeded(number, max_faults=RANDOM_FAULTS, fault_rate=RANDOM_FAULT_RATE)


def exhaustive_seed(decisions: list[int]) -> str:
    kept = list(decisions)
    while kept and kept[-1] == 0:
        kept.pop()
    return f"{EXHAUSTIVE}:{'.'.join(map(str, kept)) or '-'}"


async def explore(
    target: Target,
    *,
    budget: float | None = None,
    schedules: int | None = None,
    first_seed: int = 0,
    stop_at_first: bool = False,
    progress: Callable[[Report], None] | None = None,
    variant: Variant | None = None,
) -> Report:
    """Exhaustive phases, then random search, until ``budget`` seconds have passed or
    ``schedules`` runs were made, whichever comes first (the random search always gets its
    minimum)."""
    explorer = Explorer(target, variant)
    report = Report()
    started = time.monotonic()
    deadline = Limit.of(started, budget, schedules, 1.0)
    await explorer.reference()
    bounded = Limit.of(started, budget, schedules, EXHAUSTIVE_SHARE)
    for deviations, faults in PHASES:
        done = await _exhaustive(
            explorer, report, (deviations, faults), bounded, started, stop_at_first
        )
        if progress is not None:
            progress(report)
        if stop_at_first and not report.ok:
            break
        if not done:
            break
    seed = first_seed
    runs = 0
    while not (stop_at_first and not report.ok):
        if deadline.reached(report) and runs >= MIN_RANDOM_RUNS:
            break
        result = await explorer.run(RANDOM, seeded(seed))
        report.add(f"{RANDOM}@{seed}", result, started, explorer.last)
        seed += 1
        runs += 1
    report.phases.append(f"random: {runs} runs from seed {first_seed}")
    report.seconds = time.monotonic() - started
    return report


async def _exhaustive(
    explorer: Explorer,
    report: Report,
    bound: tuple[int, int],
    limit: Limit,
    started: float,
    stop_at_first: bool,
) -> bool:
    """One exhaustive phase within ``bound`` (deviations, faults); False when the limit or a
    violation (``stop_at_first``) cut it short."""
    deviations, faults = bound
    prefix: list[int] | None = []
    runs = 0
    while prefix is not None:
        if limit.reached(report) or (stop_at_first and not report.ok):
            report.phases.append(
                f"exhaustive, {deviations} deviation(s) and {faults} fault(s): stopped after "
                f"{runs} schedules"
            )
            return False
        chooser = DepthFirst(prefix, deviations, faults)
        result = await explorer.run(EXHAUSTIVE, chooser)
        prefix = chooser.next_prefix()
        report.add(exhaustive_seed(result.decisions), result, started, explorer.last)
        runs += 1
    report.phases.append(
        f"exhaustive, {deviations} deviation(s) and {faults} fault(s): all {runs} schedules"
    )
    return True
