"""Terminal output for the operator tools (``bus``, the audit, the bench), drawn with rich.

Progress goes to stderr, so stdout stays clean for what a script reads (the bench, whose
output is a log of its rounds, writes its line log to stdout). A progress bar is drawn only on
a terminal unless forced; tables are plain text without colour, so they read the same on a
terminal, in a pipe and in a log. Nothing is read as markup.
"""

from __future__ import annotations

import io
import time
import unicodedata
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Self, TextIO

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

TABLE_WIDTH = 200
"""Wide enough that no table of these tools wraps, whatever the terminal says."""


def _console(stream: TextIO | None, forced: bool | None) -> Console:
    # ``stderr=True`` resolves sys.stderr at each write, so a replaced stderr is honoured.
    if stream is None:
        return Console(stderr=True, force_terminal=forced, highlight=False)
    return Console(file=stream, force_terminal=forced, highlight=False)


class _Live:
    """A rich display that is live between ``with`` and its end."""

    _progress: RichProgress

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._progress.stop()


class ProgressBar(_Live):
    """One labelled bar (with a count, elapsed time and a note), used as a context manager.

    ``enabled=None`` draws it only when stderr is a terminal; True forces it, False never.
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        console = _console(stream, enabled or None)
        self.enabled = console.is_terminal if enabled is None else enabled
        self._progress = RichProgress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}", markup=False),
            console=console,
            disable=not self.enabled,
        )
        self._task = self._progress.add_task(label, total=total, note="")

    def advance(self, count: int = 1, note: str = "") -> None:
        self._progress.update(self._task, advance=count, note=note)


class Counters(_Live):
    """Live counts of several named jobs (rows exported per table), used as a context manager.

    On a terminal (or forced) each job has a line that counts up as it goes; otherwise each
    job prints one line when it finishes, so a log gets one line per job, not one per page.
    ``enabled=False`` prints nothing.
    """

    def __init__(
        self, unit: str, *, enabled: bool | None = None, stream: TextIO | None = None
    ) -> None:
        console = _console(stream, enabled or None)
        self.unit = unit
        self.live = console.is_terminal if enabled is None else enabled
        self.lines = StageLog(stream, enabled=enabled is not False and not self.live)
        self._progress = RichProgress(
            TextColumn("{task.description}", markup=False),
            TextColumn("{task.completed} " + unit),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}", markup=False),
            console=console,
            disable=not self.live,
        )
        self._tasks: dict[str, TaskID] = {}

    def update(self, name: str, count: int, *, note: str = "", done: bool = False) -> None:
        if name not in self._tasks:
            self._tasks[name] = self._progress.add_task(name, total=None, note="")
        self._progress.update(self._tasks[name], completed=count, note=note)
        if done:
            self.lines(f"{name}: {count} {self.unit}" + (f" ({note})" * bool(note)))


class StageLog:
    """Progress as one line per step, each with the seconds since the run started: for long
    runs whose steps are not countable in advance (the audit, its export, the bench)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._console = _console(stream, None)
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.started
            self._console.print(f"  {elapsed:7.1f}s  {message}", markup=False, soft_wrap=True)


def table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], *, right: Iterable[str] = ()
) -> str:
    """A plain-text table: a header, a rule, one line per row. Columns named in ``right`` are
    right-aligned (numbers); ``None`` shows as ``-``. Cells are shown as text, never as
    markup."""
    aligned = set(right)
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in columns:
        grid.add_column(name, justify="right" if name in aligned else "left", no_wrap=True)
    for row in rows:
        # Text, not markup, and no control characters: cells may hold text from outside
        # (a poison message's reason), which must not restyle or clear the operator's screen.
        grid.add_row(*(Text("-" if cell is None else printable(str(cell))) for cell in row))
    buffer = io.StringIO()
    Console(file=buffer, width=TABLE_WIDTH, color_system=None, highlight=False).print(grid)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def printable(text: str) -> str:
    """``text`` with control and other invisible characters written as escapes."""
    return "".join(
        c if unicodedata.category(c)[0] != "C" else c.encode("unicode_escape").decode()
        for c in text
    )
