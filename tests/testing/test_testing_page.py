"""docs/testing-your-app.md, run as written: its example app and tests are written into a
folder of their own and its command runs them with pytest in a fresh process, as a user
would; and its API tables list every name the kit exports and every method of the kit."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import shared.testing
from lab.local.azurite import REPO_ROOT
from shared.testing import BusKit
from tests.test_walkthrough import Block, Matcher, blocks_of, commands_of

PAGE = REPO_ROOT / "docs" / "testing-your-app.md"


def written_example(folder: Path) -> list[Block]:
    """Write the page's files into ``folder``; the page's blocks."""
    blocks = blocks_of(PAGE.read_text())
    files = [b for b in blocks if b.tag.startswith("file=")]
    assert len(files) == 2
    for block in files:
        path = folder / block.tag.removeprefix("file=")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
    return blocks


def test_the_pages_example_passes_as_a_user_runs_it(tmp_path: Path) -> None:
    blocks = written_example(tmp_path)
    [(command, shown)] = [c for b in blocks if b.language == "console" for c in commands_of(b.text)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "PYTEST_"))}
    # The repository's library, as an installed package gives it; the plugin named, as an
    # environment installed before its entry point needs (the page says so).
    environ.update(PYTHONPATH=str(REPO_ROOT), PYTEST_PLUGINS="shared.testing.plugin")
    done = subprocess.run(
        [sys.executable, *command.removeprefix("python ").split(), "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert Matcher("0").missing(shown, output) is None, output


def test_the_pages_example_passes_mypy_strict_as_a_users_code(tmp_path: Path) -> None:
    """The kit is typed for its users: their tests type-check against it, in a project of
    their own (no configuration of this repository's)."""
    written_example(tmp_path)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MYPY", "PYTEST_"))}
    environ["MYPYPATH"] = str(REPO_ROOT)  # the library as an installed package gives it
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--explicit-package-bases", "bakery"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues found in 2 source files" in done.stdout


def test_the_api_tables_list_every_exported_name_and_every_method() -> None:
    page = PAGE.read_text()
    for name in shared.testing.__all__:
        assert f"| `{name}` |" in page, name
    methods = [n for n, _ in inspect.getmembers(BusKit, inspect.isfunction) if n[0] != "_"]
    assert len(methods) >= 14
    for method in methods:
        assert f"| `{method}(" in page, method
