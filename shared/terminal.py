"""Terminal output for the operator tools (``bus``, the audit, the bench), drawn with rich.

Progress goes to stderr, so stdout stays clean for what a script reads (the bench, whose
output is a log of its rounds, writes its line log to stdout). A progress bar is drawn only on
a terminal unless forced; tables are plain text without colour, so they read the same on a
terminal, in a pipe and in a log. Nothing is read as markup.
"""

from __future__ import annotations

import io
import shutil
import time
import unicodedata
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Self, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console, JustifyMethod
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
WRAPPED_MIN_WIDTH = 20
"""A wrapped column keeps at least this many characters a line, however narrow the screen."""


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
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    right: Iterable[str] = (),
    wrap: str | None = None,
    width: int = TABLE_WIDTH,
) -> str:
    """A plain-text table: a header, a rule, one line per row. Columns named in ``right`` are
    right-aligned (numbers); ``None`` shows as ``-``. Cells are shown as text, never as
    markup.

    With ``wrap``, that column (free text, such as a reason) is wrapped onto further lines to
    fit ``width``, and every other column is shown whole: the table grows wider than
    ``width`` rather than cut an id someone has to copy."""
    aligned = set(right)
    cells = [[Text("-" if cell is None else printable(str(cell))) for cell in row] for row in rows]
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for index, name in enumerate(columns):
        widest = max([len(name), *(cell_len(row[index].plain) for row in cells)])
        if name == wrap:
            grid.add_column(name, overflow="fold", min_width=min(widest, WRAPPED_MIN_WIDTH))
        else:
            justify: JustifyMethod = "right" if name in aligned else "left"
            grid.add_column(name, justify=justify, no_wrap=True, min_width=widest)
    for row in cells:
        # Text, not markup, and no control characters: cells may hold text from outside
        # (a poison message's reason), which must not restyle or clear the operator's screen.
        grid.add_row(*row)
    if wrap is not None:
        # Room for every whole column, a gap of three between columns, and the wrapped one.
        width = max(
            width,
            sum(grid.columns[i].min_width or 0 for i in range(len(columns)))
            + 3 * (len(columns) - 1),
        )
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(grid)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def terminal_width() -> int:
    """The width of the terminal stdout is on (``COLUMNS`` when set), else ``TABLE_WIDTH``:
    a table read by a script is not wrapped for a screen that is not there."""
    return shutil.get_terminal_size((TABLE_WIDTH, 24)).columns


def printable(text: str) -> str:
    """``text`` with control and other invisible characters written as escapes."""
    return "".join(
        c if unicodedata.category(c)[0] != "C" else c.encode("unicode_escape").decode()
        for c in text
    )
