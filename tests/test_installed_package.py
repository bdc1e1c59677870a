"""The package as a team installs it: the wheel built from this repository, installed into an
environment of its own and used from a project of the team's, with no checkout on the path.

The test kit is the product's and runs the team's tests with the lab removed from the
installation. ``bus verify`` drives the simulator, which is the lab's: with the lab installed
it runs, found through the package's entry point; without it, it says what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from lab.local.azurite import REPO_ROOT
from tests.testing.test_testing_page import written_example

PACKAGE_PARTS = ("pyproject.toml", "shared", "lab")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this repository, built from a copy so the build leaves nothing here."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in PACKAGE_PARTS:
        if (REPO_ROOT / part).is_dir():
            shutil.copytree(REPO_ROOT / part, source / part, ignore=ignore)
        else:
            shutil.copy(REPO_ROOT / part, source / part)
    built = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(built), str(source)])  # fmt: skip
    [found] = built.glob("*.whl")
    return found


def installed(folder: Path, wheel: Path, *, with_lab: bool) -> Path:
    """An environment with the wheel installed (its lab removed unless ``with_lab``) and the
    packages it depends on taken from this one; returns its interpreter."""
    run([sys.executable, "-m", "venv", "--without-pip", str(folder)])
    python = folder / "bin" / "python"
    site = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).strip()
    )
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
         "--disable-pip-version-check", "--target", str(site), str(wheel)])  # fmt: skip
    if not with_lab:
        shutil.rmtree(site / "lab")
    # A path line, not a site folder: this environment's own editable install of the
    # repository (its import hook) is not activated, so nothing comes from the checkout.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run(command: list[str], cwd: Path | None = None, expect: int = 0) -> str:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "PYTEST_", "PYTHON"))
    }
    done = subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == expect, f"{command}: exit {done.returncode}\n{output}"
    return output


def imported_from(python: Path, module: str, project: Path) -> str:
    return run([str(python), "-c", f"import {module}; print({module}.__file__)"], project)


def test_the_kit_runs_a_teams_tests_with_no_lab_installed(tmp_path: Path, wheel: Path) -> None:
    python = installed(tmp_path / "env", wheel, with_lab=False)
    project = tmp_path / "project"
    written_example(project)
    assert imported_from(python, "shared", project).startswith(str(tmp_path / "env"))
    no_lab = run([str(python), "-c", "import lab"], project, expect=1)
    assert "No module named 'lab'" in no_lab
    # The kit's pytest plugin comes from the installed package's entry point, unnamed here.
    output = run([str(python), "-m", "pytest", "bakery", "-q", "-p", "no:cacheprovider"], project)
    assert " passed" in output
    assert "failed" not in output


def test_bus_verify_runs_from_the_installed_package(tmp_path: Path, wheel: Path) -> None:
    python = installed(tmp_path / "env", wheel, with_lab=True)
    project = tmp_path / "project"
    written_example(project)
    assert imported_from(python, "lab", project).startswith(str(tmp_path / "env"))
    verify = [str(python), "-m", "shared.cli", "verify", "--app", "bakery.app:app"]
    output = run([*verify, "--schedules", "6", "--budget", "120"], project)
    assert "verify: PASS" in output


def test_bus_verify_without_the_lab_says_what_is_missing(tmp_path: Path, wheel: Path) -> None:
    python = installed(tmp_path / "env", wheel, with_lab=False)
    project = tmp_path / "project"
    written_example(project)
    verify = [str(python), "-m", "shared.cli", "verify", "--app", "bakery.app:app"]
    output = run([*verify, "--schedules", "6"], project, expect=2)
    assert "bus verify runs the simulator, which ships with the package's lab" in output
    assert "Traceback" not in output
