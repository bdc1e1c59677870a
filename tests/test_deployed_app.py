"""The deployed app carries the product only: ``function_app.py`` and what it loads come from
``shared/`` and ``requirements.txt``, never from the lab (``lab/``) or the operator tools'
packages, and ``.funcignore`` deploys every module it loads while leaving the lab out.

``function_app.py`` is imported in a fresh interpreter, as the Functions host does, with the
app settings infra/ gives it (identity-based storage, Application Insights, PostgreSQL with
Entra sign-in), and its worker builds its account, its bus, every endpoint's pipeline and its
database, as the first invocations do; the modules loaded then are what the deployed app
needs."""

from __future__ import annotations

import fnmatch
import json
import sys
from importlib import metadata
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from shared.effects.addresses import url_setting
from shared.sample.charges import PROVIDER
from tests.fresh import run_fresh

REPO_ROOT = Path(__file__).resolve().parents[1]

TOOL_PACKAGES = (
    "pyspark",
    "py4j",
    "pyarrow",
    "matplotlib",
    "duckdb",
    "polars",
    "rich",
    "hypothesis",
    "playwright",
)
"""Top-level packages of requirements-tools.txt and requirements-dev.txt that Azure does not
install for the app."""

LOADED = """
import json, os, sys
startup = set(sys.modules)  # the interpreter's own, and what .pth files load
import function_app
from shared import runtime
worker = runtime.worker()
worker.account()
bus = worker.bus()
for endpoint in worker.app.endpoints:
    bus.receiver(endpoint)
worker.sql()
print(json.dumps({
    name: getattr(module, "__file__", None)
    for name, module in list(sys.modules.items())
    if name not in startup
}), flush=True)
os._exit(0)  # no exporter flush at exit: the telemetry endpoint is made up
"""


def loaded_by_function_app(**settings: str) -> dict[str, str | None]:
    """Every module a fresh interpreter loaded to import function_app.py and build its
    worker's stores, with its file."""
    done = run_fresh(
        LOADED,
        settings,
        without=("BUS_", "PYTEST_", "OTEL_", "AzureWebJobs", "APPLICATIONINSIGHTS"),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    loaded: dict[str, str | None] = json.loads(done.stdout.splitlines()[-1])
    return loaded


AZURE_SETTINGS = {
    # infra/app/function-app.bicep's settings, with made-up values; nothing connects.
    "AzureWebJobsStorage__blobServiceUri": "https://bus.blob.core.windows.net/",
    "AzureWebJobsStorage__queueServiceUri": "https://bus.queue.core.windows.net/",
    "AzureWebJobsStorage__tableServiceUri": "https://bus.table.core.windows.net/",
    "AzureWebJobsStorage__credential": "managedidentity",
    "AzureWebJobsStorage__clientId": "00000000-0000-0000-0000-000000000001",
    "APPLICATIONINSIGHTS_CONNECTION_STRING": (
        "InstrumentationKey=00000000-0000-0000-0000-000000000002;"
        "IngestionEndpoint=http://127.0.0.1:9/"
    ),
    "OTEL_LOGS_EXPORTER": "none",
    "CLEANUP_SCHEDULE": "0 */5 * * * *",
    # infra/main.bicep's, for endpoints declared with store="postgres".
    "BUS_POSTGRES_URL": "postgresql://bus@127.0.0.1:9/bus",
    "BUS_POSTGRES_ENTRA": "true",
    # infra/main.bicep's, for endpoints declared with store="cosmos" (no key: the identity).
    "BUS_COSMOS_ENDPOINT": "https://bus.documents.azure.com:443/",
    # The sample app, with ``payments`` in PostgreSQL and ``shipping`` in Cosmos DB, as the
    # demo runs it: the database driver and the Cosmos DB SDK are loaded too.
    "BUS_APP": "shared.sample.app:app",
    "SAMPLE_PAYMENTS_STORE": "postgres",
    "SAMPLE_SHIPPING_STORE": "cosmos",
    # Its payment provider, as a deployment names it (additionalAppSettings); nothing calls it.
    url_setting(PROVIDER): "https://payments.example.com",
}


@pytest.fixture(scope="module")
def loaded() -> dict[str, str | None]:
    return loaded_by_function_app(**AZURE_SETTINGS)


def test_function_app_loads_nothing_of_the_lab_or_the_tools(
    loaded: dict[str, str | None],
) -> None:
    lab = sorted(name for name in loaded if name == "lab" or name.startswith("lab."))
    assert not lab, f"function_app.py loads lab modules: {lab}"
    kit = sorted(name for name in loaded if name.startswith(("shared.testing", "pytest")))
    assert not kit, f"function_app.py loads the test kit: {kit}"
    tools = sorted(name for name in loaded if name.split(".")[0] in TOOL_PACKAGES)
    assert not tools, f"function_app.py loads tool-only packages: {tools}"
    assert "shared.runtime" in loaded  # it did load the app
    assert "asyncpg" in loaded
    assert "azure.cosmos" in loaded


def pinned(path: Path) -> set[str]:
    """Distribution names a requirements file pins, without following ``-r``."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(Requirement(line).name.lower())
    return names


def needed_by(roots: set[str]) -> set[str]:
    """``roots`` and every distribution they require, transitively (extras not followed)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            declared = requires(name) or []
        except PackageNotFoundError:
            continue
        for text in declared:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def loads_from(distribution: str, files: set[str]) -> bool:
    """Whether one of ``files`` (loaded modules) belongs to ``distribution``."""
    found = metadata.distribution(distribution)
    return any(
        str(Path(str(found.locate_file(f))).resolve()) in files
        for f in found.files or []
        if f.suffix in (".py", ".so")
    )


def test_requirements_txt_provides_every_package_function_app_loads(
    loaded: dict[str, str | None],
) -> None:
    """Every third-party package loaded comes from requirements.txt's pins or what they
    require, so Azure installs it; every pin is loaded, and none is one of the tools'."""
    runtime = pinned(REPO_ROOT / "requirements.txt")
    installed = needed_by(runtime)
    distributions = packages_distributions()
    stdlib = sys.stdlib_module_names
    missing = {}
    for name, file in loaded.items():
        top = name.split(".")[0]
        if "." in name or top in stdlib or top in ("shared", "function_app") or file is None:
            continue
        owners = {d.lower().replace("_", "-") for d in distributions.get(top, [])}
        if owners and not owners & installed:
            missing[top] = sorted(owners)
    assert not missing, f"loaded by function_app.py, not from requirements.txt: {missing}"
    files = {str(Path(file).resolve()) for file in loaded.values() if file is not None}
    unused = {name for name in runtime if not loads_from(name, files)}
    assert not unused, f"requirements.txt pins what the app never loads: {unused}"
    tools = pinned(REPO_ROOT / "requirements-tools.txt")
    assert not runtime & tools, "requirements.txt and requirements-tools.txt pin the same"
    assert not {"pyspark", "matplotlib", "pyarrow", "rich"} & runtime


def funcignore() -> list[str]:
    lines = (REPO_ROOT / ".funcignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _matches(pattern: str, path: str) -> bool:
    pattern = pattern.rstrip("/")
    if "/" not in pattern:
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    pattern = pattern.lstrip("/")
    return pattern.count("/") == path.count("/") and fnmatch.fnmatchcase(path, pattern)


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.funcignore`` (gitignore rules: the last matching pattern wins, ``!``
    re-includes, nothing under an ignored folder comes back) leaves ``path`` out."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        out = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            if _matches(pattern.removeprefix("!"), prefix):
                out = not negated
        if out:
            return True
    return False


def test_ignored_follows_gitignore_rules() -> None:
    patterns = ["lab", "infra/*", "!infra/resources.json", "*.egg-info"]
    assert ignored("lab/host/chaos.py", patterns)
    assert ignored("infra/main.bicep", patterns)
    assert not ignored("infra/resources.json", patterns)
    assert ignored("x.egg-info/PKG-INFO", patterns)
    assert not ignored("shared/bus/app.py", patterns)


def test_funcignore_deploys_what_function_app_loads_and_leaves_the_lab_out(
    loaded: dict[str, str | None],
) -> None:
    patterns = funcignore()
    assert ignored("lab/__init__.py", patterns), ".funcignore must leave out lab/"
    assert ignored("shared/testing/kit.py", patterns), ".funcignore must leave out the kit"
    for path in (
        "requirements-tools.txt",
        "requirements-demo.txt",
        "requirements-dev.txt",
        "tests/conftest.py",
    ):
        assert ignored(path, patterns), path
    repository_files = sorted(
        Path(file).resolve().relative_to(REPO_ROOT).as_posix()
        for file in loaded.values()
        if file is not None
        and Path(file).resolve().is_relative_to(REPO_ROOT)
        and "site-packages" not in Path(file).parts  # a virtual env inside the checkout
    )
    assert "shared/runtime.py" in repository_files
    needed = [*repository_files, "host.json", "requirements.txt", "infra/resources.json"]
    left_out = [path for path in needed if ignored(path, patterns)]
    assert not left_out, f".funcignore leaves out what the app needs: {left_out}"
