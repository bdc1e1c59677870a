"""``bus console`` run as an operator runs it: a real process on a free port, its address and
token read from the one line it prints, stopped with SIGINT (as Ctrl-C stops it). The browser
tests and the screenshot script start it this way."""

from __future__ import annotations

import contextlib
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LINE = re.compile(r"console: (http://127\.0\.0\.1:(\d+))/\?token=([A-Za-z0-9_-]+)\n")
"""The line ``bus console --port 0`` prints once it listens."""
START_SECONDS = 60
STOP_SECONDS = 30


@dataclass(frozen=True)
class StartedConsole:
    base: str
    """``http://127.0.0.1:PORT``"""
    token: str
    process: subprocess.Popen[str]

    @property
    def address(self) -> str:
        """The address as printed: the page with its token."""
        return f"{self.base}/?token={self.token}"


@contextlib.contextmanager
def started_console(folder: Path, environ: dict[str, str], *args: str) -> Iterator[StartedConsole]:
    """``bus console --port 0 ARGS`` in ``folder``, until the block ends. Its stderr is
    kept for the error should it not start."""
    process = subprocess.Popen(
        [sys.executable, "-m", "shared.cli", "console", "--port", "0", *args],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _first_line(process)
        found = LINE.fullmatch(line)
        if found is None:
            raise RuntimeError(f"bus console printed {line!r} first: {_stderr(process)}")
        yield StartedConsole(found[1], found[3], process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _first_line(process: subprocess.Popen[str]) -> str:
    if process.stdout is None:
        raise RuntimeError("bus console was started without a pipe for its output")
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                return process.stdout.readline()
            if process.poll() is not None:
                break
    raise RuntimeError(f"bus console did not start: {_stderr(process)}")


def _stderr(process: subprocess.Popen[str]) -> str:
    if process.poll() is None or process.stderr is None:
        return f"(still running after {START_SECONDS} s)"
    return process.stderr.read()[-4000:]
