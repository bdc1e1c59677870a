"""What a cleanup run did, per task, as counters a dashboard or a log query can read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_BAD_ROWS_LISTED = 20


def describe(error: BaseException) -> str:
    """One line for a log or a report: the error's type and the first line of its text."""
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else 'malformed field'}"


@dataclass
class TaskReport:
    task: str
    pages: int = 0
    removed: Counter[str] = field(default_factory=Counter)
    """Records deleted, by kind (e.g. ``abandoned_tokens``, ``outbox_records``)."""
    kept: Counter[str] = field(default_factory=Counter)
    """Records looked at and deliberately left, by reason (e.g. ``in_flight``, ``young``)."""
    changed: Counter[str] = field(default_factory=Counter)
    """Records rewritten to keep them, by kind (e.g. ``poison_entries_reparked``: poison
    messages that would expire, sent again with no expiry)."""
    finished: bool = False
    """The task reached the end of its records in this run."""
    skipped: str | None = None
    """Why the task did not run or stopped early: budget, leased elsewhere, lease lost, error."""
    leased_by: str | None = None
    """When another instance held the task's lease: which one, and until when."""
    resumed: bool = False
    """The task started from a checkpoint an earlier run (maybe on another instance) left."""
    bad_rows: list[str] = field(default_factory=list)
    """Records that could not be judged (malformed fields, names outside the rules), each
    with why: left as they are, reported, and passed over so the pass still finishes. The
    first ``MAX_BAD_ROWS_LISTED`` are listed; ``kept["bad_row"]`` counts them all."""

    def bad_row(self, what: str, error: BaseException) -> None:
        self.kept["bad_row"] += 1
        if len(self.bad_rows) < MAX_BAD_ROWS_LISTED:
            self.bad_rows.append(f"{what}: {describe(error)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "pages": self.pages,
            "removed": dict(sorted(self.removed.items())),
            "kept": dict(sorted(self.kept.items())),
            "changed": dict(sorted(self.changed.items())),
            "finished": self.finished,
            "skipped": self.skipped,
            "leased_by": self.leased_by,
            "resumed": self.resumed,
            "bad_rows": list(self.bad_rows),
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

    def changed(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for task in self.tasks:
            total.update(task.changed)
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
            "changed": dict(sorted(self.changed().items())),
            "tasks": [t.to_dict() for t in self.tasks],
        }
