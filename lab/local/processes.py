"""Stopping a local server started in its own process group (Azurite, the Cosmos DB server)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_group(process: subprocess.Popen[str] | None) -> None:
    """Stop ``process`` and its children: SIGTERM to its group, SIGKILL if it has not ended
    within 10 s; nothing to do if it has ended or was never started."""
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
