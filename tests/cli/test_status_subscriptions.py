"""``bus status`` names every topic the app handles where a handling endpoint is not
subscribed, with the command that subscribes it; that command works, and ``--check`` exits 4
until none is left. Run as an operator runs it: the ``bus`` command in a subprocess, on the
sample app's project folder, against an emulator of its own (the sample's names are fixed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.bus.subscriptions import handled_topics
from shared.sample.app import app as sample_app
from tests.cli.in_process import in_process
from tests.conftest import sample_provider_settings, started_azurite

pytestmark = pytest.mark.azurite

FIX = re.compile(r"\(run `(bus subscribe [^`]+)`\)")


@pytest.fixture
def own_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


def bus_command(project: Path, azurite: AzuriteEndpoints, command: str) -> tuple[int, str]:
    """``command`` (starting with ``bus``) run by bash in ``project``, as typed in a shell."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("BUS_", "AzureWebJobsStorage"))
    }
    environ.update(
        AzureWebJobsStorage=azurite.connection_string,
        BUS_APP="shared.sample.app:app",
        **sample_provider_settings(),
        PYTHONPATH=str(REPO_ROOT),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Only stdout: stderr opens with the line naming the account, before any JSON.
    return done.returncode, done.stdout if done.returncode == 0 else done.stdout + done.stderr


def test_status_names_each_unsubscribed_handler_and_a_fix_that_works(
    own_azurite: AzuriteEndpoints,
    sample_project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def bus(command: str) -> tuple[int, str]:
        return bus_command(sample_project, own_azurite, command)

    # The resources made in this process (`bus provision` is not under test here, and a
    # subprocess of it costs a start of the CLI): the commands under test run as typed.
    monkeypatch.setenv("AzureWebJobsStorage", own_azurite.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)
    assert in_process(capsys, "--no-progress")("provision")[0] == 0
    code, out = bus("bus status --json")
    assert code == 0  # informative: only --check turns it into an exit code
    gaps = json.loads(out)["unsubscribed_handlers"]
    assert {(gap["topic"], gap["endpoint"]) for gap in gaps} == set(handled_topics(sample_app))
    assert bus("bus status --check")[0] == 4

    code, out = bus("bus status")
    lines = [line for line in out.splitlines() if line.startswith("not subscribed: ")]
    assert len(lines) == len(gaps)
    assert (
        "not subscribed: topic orderplaced: endpoint shipping handles its events but is not "
        "subscribed, so they do not reach it (run `bus subscribe orderplaced shipping`)"
    ) in lines

    fixes = [found.group(1) for line in lines if (found := FIX.search(line))]
    assert len(fixes) == len(lines)
    first, *rest = fixes
    code, out = bus(first)
    assert code == 0, out
    left = json.loads(bus("bus status --json")[1])["unsubscribed_handlers"]
    assert len(left) == len(gaps) - 1
    for fix in rest:
        assert bus(fix)[0] == 0
    assert json.loads(bus("bus status --json")[1])["unsubscribed_handlers"] == []
    assert bus("bus status --check")[0] == 0
    assert "not subscribed" not in bus("bus status")[1]
