"""The console's fixtures: a private emulator per module (the sample app's queues have fixed
names), the sample app provisioned in it, and ``bus console`` running on it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.resources import RESOURCES_FILE, resources_json
from tests.conftest import sample_resources, started_azurite
from tests.console.running import RunningConsole, console_environ, running_console


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, emulator: AzuriteEndpoints) -> Path:
    """A project folder of the sample app, its resources provisioned in the emulator."""
    folder = tmp_path_factory.mktemp("project")
    resources = folder / RESOURCES_FILE
    resources.parent.mkdir(parents=True)
    resources.write_text(resources_json(sample_resources()))
    subprocess.run(
        [sys.executable, "-m", "shared.cli", "provision"],
        cwd=folder,
        env=console_environ(emulator.connection_string),
        check=True,
        capture_output=True,
        timeout=120,
    )
    return folder


@pytest.fixture(scope="module")
def console(project: Path, emulator: AzuriteEndpoints) -> Iterator[RunningConsole]:
    """``bus console`` on the sample app, for the module."""
    environ = console_environ(emulator.connection_string)
    with running_console(project, environ, "--by", "ada") as running:
        yield running
