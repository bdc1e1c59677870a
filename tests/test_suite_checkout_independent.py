"""The repository's own tests pass in a checkout that runs a user's app: ``BUS_APP`` in its
``local.settings.json`` (or the environment) and ``infra/resources.json`` regenerated for it.

The modules that test the sample app run in a copy of the repository set up as
docs/your-first-endpoint.md leaves a checkout, in a fresh interpreter: all of them with the
app in ``local.settings.json``; with it in the environment, those that read the checkout's
configuration as it was (``ENVIRONMENT_READERS``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.local.azurite import REPO_ROOT

MODULES = (
    "tests/test_resources.py",
    "tests/test_function_app.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_cli_settings.py",
    "tests/test_app_loader.py",
)
ENVIRONMENT_READERS = (
    *(m for m in MODULES if "CHECKOUT_ENVIRON" in (REPO_ROOT / m).read_text()),
    "tests/test_app_loader.py",
)
"""The modules run again with ``BUS_APP`` in the environment. The suite pins the sample app in
the environment before any test module is imported (``tests/conftest.py``), and a copy of the
repository has no ``local.settings.json`` of its own then; so every test sees the same
settings as when the user's app is named nowhere, except those that read the environment as
it was before the pin (``CHECKOUT_ENVIRON``: the check of ``infra/resources.json`` against the
configured app). Those run, with the loader's own tests; the rest already ran with the app in
``local.settings.json``, and with no app named in the suite itself."""
USER_APP = """
from shared.bus import BusApp, Command


class ReserveStock(Command):
    partition_by = "sku"
    sku: str


app = BusApp()
app.endpoint("inventory").handles(ReserveStock)(lambda ctx, cmd: None)
app.endpoint("reservations")
"""


def checkout_running_a_user_app(folder: Path) -> dict[str, str]:
    """A copy of the repository whose ``infra/resources.json`` lists a user's app; returns
    the environment to run in (nothing of this process's ``BUS_*`` settings)."""
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("shared", "lab", "tests", "infra"):
        shutil.copytree(REPO_ROOT / name, folder / name, ignore=ignore)
    for name in ("function_app.py", "host.json", "local.settings.sample.json", "pyproject.toml"):
        shutil.copy(REPO_ROOT / name, folder / name)
    (folder / "node_modules").symlink_to(REPO_ROOT / "node_modules")
    (folder / "myshop").mkdir()
    (folder / "myshop" / "__init__.py").write_text("")
    (folder / "myshop" / "inventory.py").write_text(USER_APP)
    environ = environment_for(folder)
    generated = subprocess.run(
        [sys.executable, "-m", "shared.cli", "--app", "myshop.inventory:app", "resources"],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (folder / "infra" / "resources.json").write_text(generated.stdout)
    return environ


def environment_for(folder: Path) -> dict[str, str]:
    """This process's environment less its ``BUS_*`` settings, importing from ``folder``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "PYTEST_"))}
    environ["PYTHONPATH"] = str(folder)
    return environ


@pytest.fixture(scope="module")
def user_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One checkout set up for the user's app (``bus resources`` run once), that each test
    copies to a folder of its own and changes there."""
    folder = tmp_path_factory.mktemp("checkout")
    checkout_running_a_user_app(folder)
    return folder


def copy_of(checkout: Path, folder: Path) -> dict[str, str]:
    """``checkout`` copied into ``folder``; the environment to run there."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(checkout, folder, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    return environment_for(folder)


def run_modules(
    folder: Path, environ: dict[str, str], *options: str, modules: tuple[str, ...] = MODULES
) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *modules, "-q", "-x", "-p", "no:cacheprovider", *options],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    return done.stdout


@pytest.mark.azurite
def test_the_sample_app_tests_pass_with_a_user_app_in_local_settings_json(
    user_checkout: Path, tmp_path: Path
) -> None:
    environ = copy_of(user_checkout, tmp_path)
    values = {
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
        "BUS_APP": "myshop.inventory:app",
    }
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": values}))
    out = run_modules(tmp_path, environ, "-rs")
    assert " passed" in out
    assert "SKIPPED" not in out


def test_the_environment_readers_include_the_check_of_the_resources_file() -> None:
    assert "tests/test_resources.py" in ENVIRONMENT_READERS


def test_the_sample_app_tests_pass_with_a_user_app_in_the_environment(
    user_checkout: Path, tmp_path: Path
) -> None:
    """The modules that read the checkout's configuration (``ENVIRONMENT_READERS``), less the
    Azurite tests, with ``BUS_APP`` set in the environment."""
    environ = copy_of(user_checkout, tmp_path)
    environ["BUS_APP"] = "myshop.inventory:app"
    out = run_modules(
        tmp_path, environ, "-m", "not azurite and not slow", "-rs", modules=ENVIRONMENT_READERS
    )
    assert " passed" in out
    assert "SKIPPED" not in out


def test_the_checkout_check_names_the_app_it_checked(user_checkout: Path, tmp_path: Path) -> None:
    """With a resources file left for the sample app, the one checkout test fails saying
    which app it checked, where the setting came from, and the command to run."""
    environ = copy_of(user_checkout, tmp_path)
    shutil.copy(REPO_ROOT / "infra" / "resources.json", tmp_path / "infra" / "resources.json")
    environ["BUS_APP"] = "myshop.inventory:app"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_resources.py", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert "1 failed" in done.stdout
    assert "run `bus resources > infra/resources.json`; checked against " in done.stdout
    assert "myshop.inventory:app (BUS_APP from the environment)" in done.stdout
