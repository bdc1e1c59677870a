"""Where the test suite's time goes: pytest's ``--durations=0`` lines summed per test file.

Usage::

    pytest -q -p no:cacheprovider --durations=0 --durations-min=0 > durations.txt
    python -m lab.durations durations.txt [--top 25]
    python -m lab.durations after.txt --before before.txt --file tests/x.py [--file ...]

Each duration line is one phase of one test (``setup``, ``call`` or ``teardown``). A file's
set-up seconds are those of the fixtures its tests started (an emulator, a host, a Spark
session), charged to the first test that asked for them: a session-scoped fixture shows in
the file that ran first. The table says which files cost most, and whether their time is in
the tests or in what the tests stand on.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shared.errors import InvalidValue
from shared.logsafe import shown

PHASES = ("setup", "call", "teardown")
_LINE = re.compile(
    r"^\s*(?P<seconds>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<id>\S.*)$"
)


@dataclass
class FileTime:
    """The summed phases of one test file's tests, and how many tests it ran."""

    path: str
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    tests: set[str] = field(default_factory=set)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    @property
    def per_test(self) -> float:
        return self.total / len(self.tests) if self.tests else 0.0


def per_file(lines: Iterable[str]) -> list[FileTime]:
    """The files of the duration lines among ``lines``, the most expensive first."""
    files: dict[str, FileTime] = {}
    for line in lines:
        matched = _LINE.match(line)
        if matched is None:
            continue
        test_id = matched["id"].strip()
        path = test_id.split("::", 1)[0]
        entry = files.setdefault(path, FileTime(path))
        entry.seconds[matched["phase"]] += float(matched["seconds"])
        entry.tests.add(test_id)
    return sorted(files.values(), key=lambda f: f.total, reverse=True)


def table(files: Sequence[FileTime], top: int) -> str:
    """A Markdown table of the ``top`` files, then a line of the totals over every file."""
    rows = [
        "| file | seconds | set-up | call | teardown | tests | s/test |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for f in files[:top]:
        s = f.seconds
        rows.append(
            f"| {shown(f.path)} | {f.total:.1f} | {s['setup']:.1f} | {s['call']:.1f} "
            f"| {s['teardown']:.1f} | {len(f.tests)} | {f.per_test:.2f} |"
        )
    total = sum(f.total for f in files)
    tests = sum(len(f.tests) for f in files)
    listed = sum(f.total for f in files[:top])
    rows.append("")
    rows.append(
        f"{len(files)} files, {tests} tests, {total:.1f} s summed; "
        f"the {min(top, len(files))} above hold {listed:.1f} s ({_share(listed, total)})."
    )
    return "\n".join(rows)


def comparison(before: Sequence[FileTime], after: Sequence[FileTime], paths: Sequence[str]) -> str:
    """A Markdown table of ``paths`` in two runs: seconds, tests, and each file's share of its
    run's total, which compares across runs on a machine whose speed differs between them but
    not within either (when it does, time the files themselves before and after, in turn)."""
    old = {f.path: f for f in before}
    new = {f.path: f for f in after}
    old_total = sum(f.total for f in before)
    new_total = sum(f.total for f in after)
    rows = [
        "| file | seconds before | after | tests before | after | share before | after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        a, b = old.get(path, FileTime(path)), new.get(path, FileTime(path))
        rows.append(
            f"| {shown(path)} | {a.total:.1f} | {b.total:.1f} | {len(a.tests)} | {len(b.tests)} "
            f"| {_share(a.total, old_total, 1)} | {_share(b.total, new_total, 1)} |"
        )
    rows.append(
        f"| all files | {old_total:.1f} | {new_total:.1f} "
        f"| {sum(len(f.tests) for f in before)} | {sum(len(f.tests) for f in after)} "
        "| 100 % | 100 % |"
    )
    return "\n".join(rows)


def _share(part: float, whole: float, decimals: int = 0) -> str:
    return f"{100 * part / whole:.{decimals}f} %" if whole else "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.durations", description=__doc__)
    parser.add_argument("report", type=Path, help="pytest output with --durations=0")
    parser.add_argument("--top", type=int, default=25, help="how many files to list")
    parser.add_argument(
        "--before", type=Path, help="an earlier run's output: compare the --file ones with it"
    )
    parser.add_argument(
        "--file", action="append", default=[], help="a test file to compare (repeatable)"
    )
    args = parser.parse_args(argv)
    try:
        after = read_report(args.report)
        if args.before is None:
            print(table(after, args.top))
        else:
            print(comparison(read_report(args.before), after, args.file))
    except InvalidValue as e:
        print(f"error: {shown(e)}", file=sys.stderr)
        return 2
    return 0


def read_report(report: Path) -> list[FileTime]:
    """The files of a saved pytest output; ``InvalidValue`` when it has no duration lines."""
    try:
        text = report.read_bytes().decode(errors="replace")
    except OSError as e:
        raise InvalidValue(f"cannot read {report}: {e.strerror}") from e
    # Lines end at newlines only: a carriage return inside a test id stays in it, escaped.
    files = per_file(text.split("\n"))
    if not files:
        raise InvalidValue(f"{report} has no duration lines: run pytest with --durations=0")
    return files


if __name__ == "__main__":
    sys.exit(main())
