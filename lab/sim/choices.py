"""Where a simulation's decisions come from.

A run asks its chooser at every decision point: which enabled action happens next (a
scheduling choice), whether the operation about to run gets a fault (a fault choice) and,
where the configuration allows it, whether time jumps past the grace period while nothing
runs (a time choice: free, since waiting is not a context switch; it is bounded by the
configuration instead).
Option 0 is always the default (keep running the current process; no fault), so a bound on
non-default choices bounds the search:

- ``DepthFirst`` enumerates every decision sequence with at most ``max_deviations``
  non-default scheduling choices and ``max_faults`` faults (deviation bounding: every
  interleaving reachable with that many context switches away from the default order);
- ``Seeded`` draws decisions from a seeded random generator, with a fault budget.

Each chooser keeps the decisions it made (``decisions``) so that any run can be replayed from
its list of choices, and ``Replay`` does exactly that.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

ChoiceKind = Literal["schedule", "fault", "time"]


class Chooser(Protocol):
    decisions: list[int]

    def choose(self, kind: ChoiceKind, weights: Sequence[float]) -> int:
        """Pick one of ``len(weights)`` options (weights guide random choosers only)."""
        ...


@dataclass
class DepthFirst:
    """Follows ``prefix`` and then the defaults, recording how many options each decision
    had within the budgets, so ``next_prefix`` can move to the next unexplored sequence."""

    prefix: list[int]
    max_deviations: int
    max_faults: int
    decisions: list[int] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    deviations: int = 0
    faults: int = 0

    def choose(self, kind: ChoiceKind, weights: Sequence[float]) -> int:
        if kind == "time":
            budget_left = True
        elif kind == "schedule":
            budget_left = self.deviations < self.max_deviations
        else:
            budget_left = self.faults < self.max_faults
        width = len(weights) if budget_left else 1
        position = len(self.decisions)
        choice = self.prefix[position] if position < len(self.prefix) else 0
        if choice >= width:
            raise ValueError(f"decision {position}: option {choice} of {width} is not available")
        if choice and kind == "schedule":
            self.deviations += 1
        elif choice and kind == "fault":
            self.faults += 1
        self.decisions.append(choice)
        self.widths.append(width)
        return choice

    def next_prefix(self) -> list[int] | None:
        """The next decision sequence in depth-first order, or None when all are explored."""
        for position in range(len(self.decisions) - 1, -1, -1):
            if self.decisions[position] + 1 < self.widths[position]:
                return [*self.decisions[:position], self.decisions[position] + 1]
        return None


@dataclass
class Seeded:
    """Random decisions from ``seed``; a fault is drawn with ``fault_rate`` per operation
    while ``max_faults`` allows."""

    seed: int
    max_faults: int
    fault_rate: float
    decisions: list[int] = field(default_factory=list)
    faults: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def choose(self, kind: ChoiceKind, weights: Sequence[float]) -> int:
        if kind == "fault":
            if len(weights) == 1 or self.faults >= self.max_faults:
                choice = 0
            elif self._rng.random() < self.fault_rate:
                choice = self._rng.randrange(1, len(weights))
                self.faults += 1
            else:
                choice = 0
        else:
            choice = self._rng.choices(range(len(weights)), weights=weights)[0]
        self.decisions.append(choice)
        return choice


@dataclass
class Replay:
    """Repeats a recorded list of decisions, then takes the defaults."""

    recorded: list[int]
    decisions: list[int] = field(default_factory=list)

    def choose(self, kind: ChoiceKind, weights: Sequence[float]) -> int:
        position = len(self.decisions)
        choice = self.recorded[position] if position < len(self.recorded) else 0
        if choice >= len(weights):
            raise ValueError(
                f"decision {position}: option {choice} of {len(weights)} does not exist; "
                "the recording belongs to another configuration or version of the code"
            )
        self.decisions.append(choice)
        return choice
