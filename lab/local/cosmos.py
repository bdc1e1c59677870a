"""Start and stop a local Cosmos DB server (npm ``@vercel/cosmosdb-server``) on a free port.

Used by the test suite and local runs, as ``lab.local.azurite`` is for Azurite. The package is
installed into the repository by ``npm ci`` (``make deps``); ``lab/local/cosmos_server.js``
runs it with the one fix that docs/stores.md describes. It serves HTTPS with a self-signed
certificate on 127.0.0.1 (the client does not verify a loopback account's certificate:
``shared.stores.cosmos.database.is_loopback``) and accepts any well-formed account key.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

from lab.local.processes import stop_group
from shared.errors import ConfigurationError
from shared.stores.cosmos.settings import CosmosSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("cosmos_server.js")
PACKAGE = REPO_ROOT / "node_modules/@vercel/cosmosdb-server"
LOCAL_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)
"""The Cosmos DB emulator's published key: the local server takes any base64 key, and this
one says it is no secret."""
_READY = re.compile(r"Ready to accept HTTPS connections at (\S+):(\d+)")


def find_node() -> str:
    """The node executable, once the server's package is installed."""
    node = shutil.which("node")
    if node is None or not PACKAGE.is_dir():
        raise ConfigurationError(
            "the local Cosmos DB server is not installed: run `make deps` (node and `npm ci`)"
        )
    return node


class CosmosServer:
    """One server process, its data in memory; readiness read from its own output."""

    def __init__(self, port: int = 0, startup_timeout: float = 30.0, *, fixed: bool = True) -> None:
        """``port``: 0 for one the OS picks (the tests), 8081 where local.settings.json
        expects it (the sample's BUS_COSMOS_ENDPOINT). ``fixed=False`` runs the package's own
        command, without the fix (to show what the fix is for)."""
        self.port = port
        self.fixed = fixed
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.endpoint: str | None = None
        self._output: list[str] = []

    def settings(self, database: str = "bus") -> CosmosSettings:
        if self.endpoint is None:
            raise ConfigurationError("the local Cosmos DB server is not started")
        return CosmosSettings(endpoint=self.endpoint, key=LOCAL_KEY, database=database)

    def start(self) -> str:
        """Start the server; returns its endpoint URL once it listens."""
        self.process = subprocess.Popen(
            self._command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            cwd=REPO_ROOT,
        )
        found: list[str] = []
        done = threading.Event()

        def read_output() -> None:
            if self.process is None or self.process.stdout is None:
                done.set()
                return
            for line in self.process.stdout:
                self._output.append(line.rstrip())
                match = _READY.search(line)
                if match and not found:
                    found.append(f"https://{match.group(1)}:{match.group(2)}/")
                    done.set()
            done.set()  # the process ended: wake the waiter so it can report why

        threading.Thread(target=read_output, daemon=True, name="cosmos-output").start()
        deadline = time.monotonic() + self.startup_timeout
        while not done.wait(0.05) and time.monotonic() < deadline:
            pass
        if not found:
            self.stop()
            raise ConfigurationError(
                "the local Cosmos DB server did not start within "
                f"{self.startup_timeout:.0f}s; its output:\n" + "\n".join(self._output[-20:])
            )
        self.endpoint = found[0]
        return self.endpoint

    def _command(self) -> list[str]:
        if self.fixed:
            return [find_node(), str(SCRIPT), str(self.port), "127.0.0.1"]
        packaged = str(PACKAGE / "lib/cli.js")
        return [find_node(), packaged, "-p", str(self.port), "--host", "127.0.0.1"]

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_group(process)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
