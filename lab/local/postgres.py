"""Start and stop a private PostgreSQL server from Debian's packages.

Used by the test suite and the local demo, as ``lab.local.azurite`` is for Azurite. The
server gets a fresh data folder, a free port on 127.0.0.1, its socket inside that folder and
trust authentication for the local ``bus`` role. ``initdb`` and ``postgres`` refuse to run as
root: as root they run as the ``postgres`` user (``runuser``) on a folder that user owns.
``stop()`` signals the postmaster by the PID in its ``postmaster.pid``, nothing else.
``POSTGRES_BIN`` overrides the binaries' folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from shared.errors import ConfigurationError

ROLE = "bus"
DATABASE = "postgres"


def find_binaries() -> Path:
    """The folder holding initdb and postgres: $POSTGRES_BIN (only it, when set) or Debian's
    newest version."""
    configured = os.environ.get("POSTGRES_BIN")
    if configured:
        candidates = [Path(configured)]
    else:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "postgres").exists():
            return folder
    if configured:
        raise ConfigurationError(f"POSTGRES_BIN={configured} holds no initdb and postgres")
    raise ConfigurationError(
        "PostgreSQL is not installed: run `make deps` (it installs Debian's postgresql)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One server process with its own data folder."""

    def __init__(self, location: str | None = None, startup_timeout: float = 60.0) -> None:
        self._own_location = location is None
        self.location = Path(location or tempfile.mkdtemp(prefix="postgres-"))
        self.data = self.location / "data"
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def _as_owner(self, command: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return command
        if shutil.which("runuser") is None:
            raise ConfigurationError("running as root needs runuser to start PostgreSQL")
        return ["runuser", "-u", "postgres", "--", *command]

    def _prepare(self, binaries: Path) -> None:
        # A given location's parents must let the postgres user through (mkdtemp's are 0700).
        self.location.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.location, "postgres", "postgres")
        if (self.data / "PG_VERSION").exists():
            return
        result = subprocess.run(
            self._as_owner(
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    ROLE,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--no-instructions",
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ConfigurationError(f"initdb failed: {result.stderr.strip()[-2000:]}")

    def start(self) -> str:
        """Start the server; returns its libpq URL once it accepts connections."""
        binaries = find_binaries()
        self._prepare(binaries)
        self.port = free_port()
        log = open(self.location / "server.log", "ab")  # noqa: SIM115 (the server keeps it)
        self.process = subprocess.Popen(
            self._as_owner(
                [
                    str(binaries / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.location),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    # A test and demo server: durability across an OS crash is not needed.
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ]
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self._wait_until_ready(binaries, self.process)
        return self.url

    def _wait_until_ready(self, binaries: Path, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ConfigurationError(f"PostgreSQL exited at start: {self._log_tail()}")
            ready = subprocess.run(
                [str(binaries / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                check=False,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        raise ConfigurationError(
            f"PostgreSQL did not start in {self.startup_timeout}s: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.location / "server.log").read_text(errors="replace")[-2000:]
        return "(no log)"

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def stop(self) -> None:
        """Fast shutdown (SIGINT) of this server's postmaster, then wait for it."""
        pid = self.postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid or self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            self.process = None
        if self._own_location:
            shutil.rmtree(self.location, ignore_errors=True)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
