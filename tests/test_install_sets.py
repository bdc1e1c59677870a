"""What `make demo` installs against what `make test` does (issue: the demo installed every
test and bench package, Chromium included). The demo's set is requirements-demo.txt followed
through its ``-r`` includes, and everything those pins require; none of the packages that only
the tests, the lab's benches and the linters use may be in it, and the demo's own modules must
import without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_deployed_app import REPO_ROOT, needed_by, pinned

TEST_ONLY = {
    "pytest",
    "pytest-asyncio",
    "pytest-xdist",
    "wheel",
    "hypothesis",
    "ruff",
    "mypy",
    "asyncpg-stubs",
    "pycep-parser",
    "starlette",
    "uvicorn",
    "playwright",
    "duckdb",
    "polars",
}
"""The tests', the linters' and the audit bench's packages: requirements-dev.txt's own pins."""
TEST_ONLY_MODULES = (
    "pytest",
    "_pytest",
    "pytest_asyncio",
    "xdist",
    "hypothesis",
    "ruff",
    "mypy",
    "pycep",
    "starlette",
    "uvicorn",
    "playwright",
    "duckdb",
    "polars",
)
"""The top-level modules of those packages."""

BLOCKED_IMPORT = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not in the demo's install set")
        return None
sys.meta_path.insert(0, Refuse())
import lab.local.demo
print("imported")
"""


def included(path: Path) -> list[Path]:
    """``path`` and every requirements file it includes with ``-r``, transitively."""
    found = [path]
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found += included(path.parent / line.removeprefix("-r ").strip())
    return found


def pins(path: Path) -> set[str]:
    return set().union(*(pinned(p) for p in included(path)))


def test_the_demo_set_pulls_in_no_test_only_package() -> None:
    demo = pins(REPO_ROOT / "requirements-demo.txt")
    assert {"azure-functions", "pyspark", "rich", "asyncpg"} <= demo
    pulled = needed_by(demo) & TEST_ONLY
    assert not pulled, f"make demo would install test-only packages: {sorted(pulled)}"


def test_the_test_set_is_the_demo_set_and_the_test_only_packages() -> None:
    dev = pins(REPO_ROOT / "requirements-dev.txt")
    demo = pins(REPO_ROOT / "requirements-demo.txt")
    assert dev - demo == TEST_ONLY
    assert REPO_ROOT / "requirements-demo.txt" in included(REPO_ROOT / "requirements-dev.txt")


def test_the_demo_imports_without_the_test_only_packages() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT.format(blocked=TEST_ONLY_MODULES)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"


def test_make_demo_installs_the_demo_set_and_no_browser() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "\ndemo: demo-deps\n" in makefile
    [deps_line] = [line for line in makefile.splitlines() if line.startswith("demo-deps:")]
    assert "chromium" not in deps_line
    assert "-r requirements-demo.txt" in makefile
