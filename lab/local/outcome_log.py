"""The demo's outcome log: every receive appends ``{"endpoint", "outcome"}`` as one JSON line
to the file named by ``BUS_OUTCOME_LOG``, so the demo can count suppressed duplicates across
host restarts. Off unless that setting is set."""

from __future__ import annotations

import json
import os

from shared.bus import Outcome
from shared.settings import Settings

OUTCOME_LOG_SETTING = "BUS_OUTCOME_LOG"


class OutcomeLog:
    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def from_settings(cls, settings: Settings) -> OutcomeLog | None:
        path = settings.get(OUTCOME_LOG_SETTING)
        return cls(path) if path else None

    def record(self, endpoint: str, outcome: Outcome) -> None:
        _append_line(self.path, json.dumps({"endpoint": endpoint, "outcome": outcome.value}))


def _append_line(path: str, line: str) -> None:
    # One O_APPEND write per line: lines stay whole even when the process is killed, and a
    # few hundred bytes never block long enough to matter to the event loop.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
