"""The local host as a child process: started, killed with SIGKILL, restarted, stopped.

Used by the demo and the crash tests. The child writes its output to a log file, which is
also where readiness is read from (the ``host: ready`` line), so nothing blocks on a
pipe nobody drains.

The child runs in the log file's folder, its settings the environment given plus that
folder's ``local.settings.json`` (usually none): never the checkout's, beside
``function_app.py``, which a developer has copied from the sample and which would otherwise
mix with the connection the caller gave (an ambiguous storage connection, refused).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from shared.errors import ConfigurationError

READY_MARK = "host: ready "
CHECKOUT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nobody listens on right now (kept across restarts of one host)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HostProcess:
    """``python -m lab.host`` for one app, on a fixed port, one incarnation at a time."""

    def __init__(
        self,
        app: Path,
        environ: Mapping[str, str],
        log_path: Path,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.environ = dict(environ)
        self.log_path = log_path
        self.port = port or free_port()
        self.args = list(args)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start an incarnation and wait until it says it is ready."""
        if self.process is not None and self.process.poll() is None:
            raise ConfigurationError("the host is already running")
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        folder = self.log_path.parent
        command = [sys.executable, "-m", "lab.host", "--app", str(self.app)]
        command += ["--port", str(self.port), "--settings", str(folder / "local.settings.json")]
        command += self.args
        # lab.host is imported from this checkout, whatever the child's current folder.
        path = os.pathsep.join(p for p in (str(CHECKOUT), self.environ.get("PYTHONPATH")) if p)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=folder,
                env={**self.environ, "PYTHONPATH": path},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY_MARK in self.log_path.read_bytes()[offset:].decode(errors="replace"):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log_path.read_bytes()[offset:].decode(errors="replace")[-2000:]
        self.kill()
        raise ConfigurationError(f"the local host did not become ready; its output:\n{tail}")

    def pid(self) -> int:
        """The running incarnation's process id (to read its memory from /proc)."""
        if self.process is None or self.process.poll() is not None:
            raise ConfigurationError("the host is not running")
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind runs in the child, as in a machine crash."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait for the graceful stop; returns the exit code (SIGKILL after
        ``timeout``, reported as -9)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.process.returncode)
