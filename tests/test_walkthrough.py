"""docs/your-first-endpoint.md, run as written: its module, settings file, patches and
commands, in a copy of the repository in a temporary folder, through the real ``bus``
command, curl and the real local host process, against a fresh Azurite.

The page's blocks drive the test, so the page cannot drift from the code:

- ``python file=PATH`` / ``json file=PATH`` write a file; ``diff patch=PATH`` applies a patch
  (context lines, ``-`` removed, ``+`` added);
- ``console`` blocks: each ``$ `` line is run with bash in the project folder; the lines
  after it are its output (stdout and stderr), matched line by line, in order, where ``...``
  stands for lines left out, and ids, times, decimals, pids and the number of schedules
  ``bus verify`` explored may differ (an id the page shows is then replaced by the real one
  in later commands and outputs);
- a command running ``python -m lab.host`` starts the host in the background, stopping the
  running one first as Ctrl-C would; ``text host-log`` blocks are lines that must appear in
  the running host's log.

What differs from the page, because tests share a machine: Azurite runs on ports of its own
(its connection string stands for ``UseDevelopmentStorage=true`` in the settings files the
page copies and writes: set in the environment too, it would make the connection ambiguous,
which every command refuses), the host listens on a free port instead of 7071, and in
host.json the visibilityTimeout is zero (the Functions default) instead of ten seconds and
the maxPollingInterval half a second instead of two, so that five failed tries take a
second and the host picks up each message the page sends within half a second. The test
kit's pytest plugin is named by ``PYTEST_PLUGINS``, as the page's ``.venv`` would register it
(the entry point) but the one running the tests may have been installed before it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lab.host.process import READY_MARK, free_port
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.app_loader import APP_SETTING, configured_app
from shared.bus import Bus, BusConfig, Command, Outcome
from shared.bus.unsubscribed import unsubscribed_counts
from shared.http_ingress import message_types
from shared.provisioning import provision
from shared.resources import resources_for
from shared.settings import StorageSettings, resolve_settings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import started_azurite, unique_name

PAGE = REPO_ROOT / "docs" / "your-first-endpoint.md"
SKIPPED = ("source .venv/bin/activate", "node_modules/.bin/azurite")
"""Commands the test does for itself: the venv is the one running the tests, and Azurite is
the fixture's."""
HOST_COMMAND = "python -m lab.host"
PAGE_PORT = "7071"
WAIT_SECONDS = 90.0

_FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")
_VARIABLE = re.compile(
    r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"|(?P<time>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:\d\d)?)"
    r"|(?P<pid>pid=\d+)"
    r"|(?P<schedules>schedules=\d+)"
    r"|(?P<decimal>\d+\.\d+)"
    r"|(?P<space>\s+)"
    r"|(?P<rule>─+)"
)
_PATTERNS = {
    "time": r"[\d:T.,+ -]+",
    "pid": r"pid=\d+",
    "schedules": r"schedules=\d+",
    "decimal": r"\d+(?:\.\d+)?",
    "space": r"\s+",
    "rule": "─+",
}


@dataclass
class Block:
    language: str
    tag: str
    text: str


def blocks_of(page: str) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    found: list[Block] = []
    lines = iter(page.splitlines())
    for line in lines:
        opened = _FENCE.match(line)
        if not opened:
            continue
        body: list[str] = []
        for inner in lines:
            if inner.startswith("```"):
                break
            body.append(inner)
        found.append(Block(opened.group(1), opened.group(2).strip(), "\n".join(body) + "\n"))
    return found


def commands_of(console: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines and the output lines shown after each."""
    steps: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def patched(text: str, diff: str) -> str:
    """``text`` with a patch applied: its context and ``-`` lines must occur exactly once."""
    before, after = [], []
    for line in diff.splitlines():
        mark, rest = line[:1], line[1:]
        if mark in (" ", "-"):
            before.append(rest)
        if mark in (" ", "+"):
            after.append(rest)
    old, new = "\n".join(before) + "\n", "\n".join(after) + "\n"
    assert text.count(old) == 1, f"the page's patch does not apply:\n{diff}"
    return text.replace(old, new)


@dataclass
class Matcher:
    """Matches the page's output lines against real ones; ids the page shows are learnt."""

    port: str
    ids: dict[str, str] = field(default_factory=dict)

    def real(self, text: str, ids: dict[str, str] | None = None) -> str:
        """A command or output of the page with the real ids and port."""
        for shown, actual in (self.ids if ids is None else ids).items():
            text = text.replace(shown, actual)
        return text.replace(f":{PAGE_PORT}", f":{self.port}").replace(
            f"port={PAGE_PORT}", f"port={self.port}"
        )

    def pattern(self, line: str, ids: dict[str, str]) -> tuple[re.Pattern[str], list[str]]:
        """``line`` as a regular expression; the ids it shows that are not known yet are
        captured, in the order of the returned names."""
        parts: list[str] = []
        unknown: list[str] = []
        position = 0
        line = self.real(line.rstrip(), ids)
        for found in _VARIABLE.finditer(line):
            parts.append(re.escape(line[position : found.start()]))
            position = found.end()
            kind, value = found.lastgroup, found.group()
            if kind == "uuid" and value in ids.values():
                parts.append(re.escape(value))
            elif kind == "uuid" and value in unknown:
                parts.append(f"(?P=g{unknown.index(value)})")
            elif kind == "uuid":
                parts.append(f"(?P<g{len(unknown)}>[0-9a-f-]{{36}})")
                unknown.append(value)
            else:
                parts.append(_PATTERNS[kind or ""])
        parts.append(re.escape(line[position:]))
        return re.compile("".join(parts)), unknown

    def missing(self, shown: list[str], actual: str) -> str | None:
        """The first shown line that does not appear, in order, in ``actual`` (None: all
        do, and the ids they show are learnt)."""
        lines, at, ids = actual.splitlines(), 0, dict(self.ids)
        for line in shown:
            if line.strip() == "...":
                continue
            pattern, unknown = self.pattern(line, ids)
            while at < len(lines):
                match = pattern.fullmatch(lines[at].rstrip())
                at += 1
                if match:
                    ids.update({name: match.group(f"g{i}") for i, name in enumerate(unknown)})
                    break
            else:
                return line
        self.ids = ids
        return None


class Project:
    """A copy of the repository in ``folder`` where the page's steps run."""

    def __init__(self, folder: Path, azurite: AzuriteEndpoints) -> None:
        self.folder = folder
        self.matcher = Matcher(str(free_port()))
        self.host: subprocess.Popen[bytes] | None = None
        self.host_log: Path | None = None
        self.host_logs: list[Path] = []
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO_ROOT / "shared", folder / "shared", ignore=ignore)
        shutil.copytree(REPO_ROOT / "lab", folder / "lab", ignore=ignore)  # the local host
        shutil.copytree(REPO_ROOT / "infra", folder / "infra", ignore=ignore)
        self.emulator = azurite
        shutil.copy(REPO_ROOT / "function_app.py", folder / "function_app.py")
        sample = REPO_ROOT / "local.settings.sample.json"
        self.write(folder / sample.name, sample.read_text())
        host = json.loads((REPO_ROOT / "host.json").read_text())
        host["extensions"]["queues"]["visibilityTimeout"] = "00:00:00"
        host["extensions"]["queues"]["maxPollingInterval"] = "00:00:00.5"
        (folder / "host.json").write_text(json.dumps(host, indent=2))
        self.environ = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("BUS_", "AzureWebJobsStorage", "CLEANUP_"))
        }
        self.environ.update(
            PYTHONPATH=str(folder),  # this copy of shared/ and lab/, as an editable install
            PYTHONUNBUFFERED="1",  # stdout and stderr interleaved as on a terminal
            PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            PYTEST_PLUGINS="shared.testing.plugin",
        )

    def write(self, path: Path, text: str) -> None:
        """Write a file of the page's, with this emulator's connection string for the one on
        the standard ports."""
        emulator = json.dumps(self.emulator.connection_string)
        path.write_text(text.replace('"UseDevelopmentStorage=true"', emulator))

    def follow(self, blocks: list[Block]) -> None:
        """Do what the page's blocks say, in order: run its commands (checking what they
        print), write and patch its files, wait for the host's log lines it shows."""
        for block in blocks:
            if block.language == "console":
                for command, shown in commands_of(block.text):
                    self.run(command, shown)
            elif block.tag.startswith("file="):
                self.write(self.folder / block.tag.removeprefix("file="), block.text)
            elif block.tag.startswith("patch="):
                path = self.folder / block.tag.removeprefix("patch=")
                path.write_text(patched(path.read_text(), block.text))
            elif block.tag == "host-log":
                self.wait_for_log(block.text.splitlines())

    def run(self, command: str, shown: list[str]) -> None:
        if command.startswith(SKIPPED):
            return
        if HOST_COMMAND in command:
            self.start_host(command, shown)
            return
        done = subprocess.run(
            ["bash", "-c", self.matcher.real(command)],
            cwd=self.folder,
            env=self.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
        output = done.stdout.decode(errors="replace")
        assert done.returncode == 0, f"$ {command}\n{output}"
        missing = self.matcher.missing(shown, output)
        assert missing is None, f"$ {command}\nshown: {missing}\nprinted:\n{output}"

    def start_host(self, command: str, shown: list[str]) -> None:
        self.stop_host()
        self.host_log = self.folder / f"host-{len(self.host_logs) + 1}.log"
        self.host_logs.append(self.host_log)
        with open(self.host_log, "wb") as log:
            self.host = subprocess.Popen(
                ["bash", "-c", f"{command} --port {self.matcher.port}"],
                cwd=self.folder,
                env=self.environ,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_for_log(shown, ready=True)

    def wait_for_log(self, shown: list[str], ready: bool = False) -> None:
        assert self.host is not None, "no host is running"
        assert self.host_log is not None
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            text = self.host_log.read_text(errors="replace")
            waiting = self.matcher.missing(shown, text)
            if waiting is None and (not ready or READY_MARK in text):
                return
            exited = self.host.poll() is not None
            if exited or time.monotonic() > deadline:
                pytest.fail(f"host log lacks: {waiting}\nlog:\n{text[-6000:]}")
            time.sleep(0.2)

    def stop_host(self) -> None:
        """Ctrl-C (SIGINT to the foreground process group): a graceful stop, exit code 0."""
        if self.host is None or self.host.poll() is not None:
            return
        os.killpg(self.host.pid, signal.SIGINT)
        assert self.host.wait(timeout=60) == 0
        assert self.host_log is not None
        assert self.host_log.read_text().rstrip().endswith("host: stopped")

    def kill_host(self) -> None:
        if self.host is not None and self.host.poll() is None:
            os.killpg(self.host.pid, signal.SIGKILL)
            self.host.wait(timeout=10)


@pytest.fixture
def own_azurite() -> Iterator[AzuriteEndpoints]:
    """An emulator of its own: the page's names (inventory, order-1, ...) are fixed, and
    other tests may use them in the session's emulator."""
    yield from started_azurite()


def replayed_id(blocks: list[Block]) -> str:
    """The message id the page replays (``bus replay ... --id ID``)."""
    for block in blocks:
        if block.language == "console" and (found := re.search(r"--id (\S+)", block.text)):
            return found.group(1)
    raise AssertionError("the page replays no message by id")


async def state_of(connection: str, table: str, partition: str) -> dict[str, object]:
    async with AzureStorageAccount(StorageSettings(connection)) as account:
        found = await account.table(table).query(partition_key=partition, row_keys=["state"])
    return dict(json.loads(str(found.entities[0]["data"])))


@pytest.mark.azurite
def test_the_walkthrough_runs_as_written(own_azurite: AzuriteEndpoints, tmp_path: Path) -> None:
    blocks = blocks_of(PAGE.read_text())
    project = Project(tmp_path, own_azurite)
    try:
        project.follow(blocks)
        project.stop_host()
    finally:
        project.kill_host()

    # Behind the printed lines: the state each endpoint committed, once per message.
    connection = own_azurite.connection_string
    assert asyncio.run(state_of(connection, "inventory", "sku-a")) == {
        "available": 6,
        "reserved": 4,
    }
    assert asyncio.run(state_of(connection, "inventory", "broken-1")) == {
        "available": 9,
        "reserved": 1,
    }
    assert asyncio.run(state_of(connection, "reservations", "sku-a")) == {
        "reserved": 4,
        "rejected": 1,
    }
    assert asyncio.run(state_of(connection, "reservations", "broken-1")) == {
        "reserved": 1,
        "rejected": 0,
    }
    logs = "".join(path.read_text() for path in project.host_logs)
    replayed = project.matcher.ids[replayed_id(blocks)]
    assert logs.count(f"message_id={replayed} outcome=processed") == 1
    assert logs.count(f"message_id={replayed} outcome=poisoned") == 1
    # Without --verbose the host logs what it does, not every storage request.
    assert "http_logging_policy" not in logs


def writing_an_endpoint_example() -> str:
    """The first Python block of docs/writing-endpoints.md's "Writing an endpoint"."""
    page = (REPO_ROOT / "docs" / "writing-endpoints.md").read_text()
    section = page.split("## Writing an endpoint", 1)[1].split("\n## ", 1)[0]
    return next(b.text for b in blocks_of(section) if b.language == "python")


async def test_the_endpoint_example_runs_as_its_page_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded by ``BUS_APP`` from a module of the user's; PlaceOrder commits ``placed`` and
    sends ChargePayment to payments; OrderPlaced, with no subscriber yet, is counted."""
    package = unique_name("myshop")  # a module name no other test has imported
    (tmp_path / package).mkdir()
    (tmp_path / package / "app.py").write_text(writing_an_endpoint_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = resolve_settings(environ={APP_SETTING: f"{package}.app:app"}, local_file=None)
    app = configured_app(settings)
    account = MemoryStorageAccount()
    await provision(account, resources_for(app.endpoints))
    bus = Bus(app, account)
    place_order = message_types(app)["PlaceOrder"].model_validate(
        {"order_id": "o-1", "amount_cents": 1250}
    )
    assert isinstance(place_order, Command)
    receipt = await bus.client("cli").send(place_order, to="orders", idempotency_key="o-1")
    for endpoint in ("orders", "payments"):
        (message,) = await account.queue(endpoint).receive()
        assert await bus.receive(endpoint, message.content) is Outcome.PROCESSED
    for endpoint, status in (("orders", "placed"), ("payments", "charged")):
        found = await account.table(endpoint).query(partition_key="o-1", row_keys=["state"])
        assert json.loads(str(found.entities[0]["data"])) == {"status": status}
    topics = account.blob_container(BusConfig().topics_container)
    assert await unsubscribed_counts(topics) == {"orderplaced": 1}
    assert receipt.message_ids
