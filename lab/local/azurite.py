"""Start and stop the Azurite storage emulator on free ports.

Used by the test suite and the local demo. Azurite is installed into the repository by
``npm ci`` (see Makefile); ``AZURITE_BIN`` overrides where it is looked for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from lab.local.processes import stop_group
from shared.errors import ConfigurationError
from shared.settings import DEV_ACCOUNT, DEV_KEY

REPO_ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"Azurite (Blob|Queue|Table) service is successfully listening at (\S+)")


def find_azurite() -> str:
    """Path of the azurite executable: $AZURITE_BIN, the repo's node_modules, or PATH."""
    candidates = [
        os.environ.get("AZURITE_BIN"),
        str(REPO_ROOT / "node_modules/.bin/azurite"),
        shutil.which("azurite"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise ConfigurationError(
        "azurite is not installed: run `make deps` (it runs `npm ci` in the repository)"
    )


@dataclass(frozen=True)
class AzuriteEndpoints:
    blob: str
    queue: str
    table: str

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
            f"BlobEndpoint={self.blob}/{DEV_ACCOUNT};QueueEndpoint={self.queue}/{DEV_ACCOUNT};"
            f"TableEndpoint={self.table}/{DEV_ACCOUNT};"
        )


class Azurite:
    """One emulator process with its own data folder, on ports chosen by the OS.

    Readiness is read from the emulator's own output (it prints each listening address), so
    there is no polling and no port race. ``stop()`` signals only this process's group.
    """

    def __init__(self, location: str | None = None, startup_timeout: float = 30.0) -> None:
        self._own_location = location is None
        self.location = location or tempfile.mkdtemp(prefix="azurite-")
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.endpoints: AzuriteEndpoints | None = None
        self._output: list[str] = []

    def start(self) -> AzuriteEndpoints:
        command = [
            find_azurite(),
            "--silent",
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--loose",
            "--location",
            self.location,
            "--blobHost",
            "127.0.0.1",
            "--queueHost",
            "127.0.0.1",
            "--tableHost",
            "127.0.0.1",
            "--blobPort",
            "0",
            "--queuePort",
            "0",
            "--tablePort",
            "0",
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        found: dict[str, str] = {}
        done = threading.Event()

        def read_output() -> None:
            if self.process is None or self.process.stdout is None:
                done.set()  # stop() ran first: nothing to read; wake the waiter
                return
            for line in self.process.stdout:
                self._output.append(line.rstrip())
                match = _LISTENING.search(line)
                if match:
                    found[match.group(1).lower()] = match.group(2).rstrip("/")
                    if len(found) == 3:
                        done.set()
            done.set()  # the process ended: wake the waiter so it can report why

        threading.Thread(target=read_output, daemon=True, name="azurite-output").start()
        deadline = time.monotonic() + self.startup_timeout
        while not done.wait(0.05):
            if time.monotonic() > deadline:
                break
        if len(found) != 3:
            self.stop()
            raise ConfigurationError(
                "azurite did not start within "
                f"{self.startup_timeout:.0f}s; its output:\n" + "\n".join(self._output[-20:])
            )
        self.endpoints = AzuriteEndpoints(found["blob"], found["queue"], found["table"])
        return self.endpoints

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_group(process)
        if self._own_location:
            shutil.rmtree(self.location, ignore_errors=True)

    def __enter__(self) -> AzuriteEndpoints:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
