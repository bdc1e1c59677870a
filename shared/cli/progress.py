"""A small progress bar on stderr for long operator commands (replay, status, cleanup).

Drawn only on a terminal, unless forced, so pipes and logs get clean output.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


class Progress:
    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self.total = total
        self.done = 0
        self.started = time.monotonic()

    def advance(self, count: int = 1, note: str = "") -> None:
        self.done += count
        if self.enabled:
            self.stream.write("\r" + self.render(note))
            self.stream.flush()

    def render(self, note: str = "") -> str:
        elapsed = time.monotonic() - self.started
        if self.total:
            share = min(1.0, self.done / self.total)
            bar = "#" * int(share * WIDTH)
            text = f"{self.label} [{bar:<{WIDTH}}] {self.done}/{self.total}"
        else:
            text = f"{self.label} {self.done}"
        return f"{text} {elapsed:.0f}s {note}".rstrip()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
