"""The kit's pytest plugin in a user's project: its ``bus_kit`` fixture runs the app
``BUS_APP`` names when the project defines no ``bus_app`` of its own, in a fresh pytest
process, as a user's test run is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lab.local.azurite import REPO_ROOT

USER_TEST = """
import pytest

from shared.testing import BusKit
from tests.testing.bakery import Oven, PlaceOrder

pytestmark = pytest.mark.asyncio


async def test_the_named_app_is_the_one_under_test(bus_kit: BusKit) -> None:
    await bus_kit.send(PlaceOrder(order="o1", cakes=3), to="orders")
    await bus_kit.run_until_quiet()
    assert await bus_kit.state("kitchen", "o1", Oven) == Oven(baked=3)
"""


def run_user_test(folder: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_user.py").write_text(USER_TEST)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "PYTEST_"))}
    environ.update(PYTHONPATH=str(REPO_ROOT), PYTEST_PLUGINS="shared.testing.plugin", **settings)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bus_kit_runs_the_app_bus_app_names(tmp_path: Path) -> None:
    done = run_user_test(tmp_path, BUS_APP="tests.testing.bakery:app")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_an_app_that_cannot_be_loaded_fails_the_test_saying_so(tmp_path: Path) -> None:
    done = run_user_test(tmp_path, BUS_APP="tests.testing.no_such_module:app")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ConfigurationError" in done.stdout
    assert "no_such_module" in done.stdout
