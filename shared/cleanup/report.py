"""What a cleanup run did, per task, as counters a dashboard or a log query can read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskReport:
    task: str
    pages: int = 0
    removed: Counter[str] = field(default_factory=Counter)
    """Records deleted, by kind (e.g. ``abandoned_tokens``, ``outbox_records``)."""
    kept: Counter[str] = field(default_factory=Counter)
    """Records looked at and deliberately left, by reason (e.g. ``in_flight``, ``young``)."""
    finished: bool = False
    """The task reached the end of its records in this run."""
    skipped: str | None = None
    """Why the task did not run or stopped early: budget, leased elsewhere, lease lost, error."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "pages": self.pages,
            "removed": dict(sorted(self.removed.items())),
            "kept": dict(sorted(self.kept.items())),
            "finished": self.finished,
            "skipped": self.skipped,
        }


@dataclass
class CleanupReport:
    owner: str
    started_at: str
    elapsed_seconds: float = 0.0
    budget_seconds: float = 0.0
    tasks: list[TaskReport] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every task finished a full pass in this run."""
        return all(t.finished for t in self.tasks)

    def removed(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for task in self.tasks:
            total.update(task.removed)
        return total

    def kept(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for task in self.tasks:
            total.update(task.kept)
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "started_at": self.started_at,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "budget_seconds": self.budget_seconds,
            "complete": self.complete,
            "removed": dict(sorted(self.removed().items())),
            "kept": dict(sorted(self.kept().items())),
            "tasks": [t.to_dict() for t in self.tasks],
        }
