"""Spark's Python workers started by this test process, found in /proc (Linux), to be
killed as a crash would kill them. Only descendants of this process are ever looked at: the
machine may run other Spark jobs."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

DAEMON = b"pyspark.daemon"


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # The command name (field 2) may hold spaces and parentheses: split after its end.
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def python_workers() -> list[int]:
    """The forked workers of the pyspark daemons below this process (not the daemons)."""
    parents = _parents()
    mine = {os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in mine} - mine
        grew = bool(more)
        mine |= more
    return sorted(
        pid for pid in mine if DAEMON in _command(pid) and DAEMON in _command(parents.get(pid, 0))
    )


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own
            os.kill(pid, signal.SIGKILL)
