"""BUS_APP names the app every process runs; a wrong one is a clear start-up error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from shared.app_loader import configured_app, load_app
from shared.errors import ConfigurationError
from shared.sample.app import app as sample_app
from shared.settings import resolve_settings
from tests.conftest import unique_name

APP = textwrap.dedent(
    """
    from shared.bus import BusApp, Command, RetryPolicy

    app = BusApp()
    empty = BusApp()
    count = 3


    class ReserveStock(Command):
        partition_by = "sku"
        sku: str


    class ReleaseStock(Command):
        partition_by = "sku"
        sku: str


    inventory = app.endpoint("inventory")
    inventory.handles(ReserveStock)(lambda ctx, cmd: None)

    # A policy for a type the endpoint never handles: a typo or a forgotten handler.
    mistaken = BusApp()
    stock = mistaken.endpoint("stock", retry_for={ReleaseStock: RetryPolicy(immediate=1)})
    stock.handles(ReserveStock)(lambda ctx, cmd: None)


    # A second version of a type that cannot read the first: no previous model named.
    class CountStock(Command):
        version = 2
        sku: str


    unreadable = BusApp()
    unreadable.endpoint("counting").handles(CountStock)(lambda ctx, cmd: None)
    """
)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh package of the user's on the path (a new name per test: modules are cached)."""
    name = unique_name("shop")
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "app.py").write_text(APP)
    (tmp_path / name / "broken.py").write_text("import nosuchpackage\n")
    (tmp_path / name / "raising.py").write_text("raise RuntimeError('no database')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_the_sample_app_is_the_default_only_when_nothing_is_set(package: str) -> None:
    assert configured_app(resolve_settings(environ={}, local_file=None)) is sample_app
    chosen = configured_app(resolve_settings(environ={"BUS_APP": f"{package}.app:app"}))
    assert list(chosen.endpoints) == ["inventory"]


def test_the_command_line_option_wins_over_the_environment(package: str) -> None:
    settings = resolve_settings(
        {"BUS_APP": f"{package}.app:app"}, environ={"BUS_APP": "shared.sample.app:app"}
    )
    assert list(configured_app(settings).endpoints) == ["inventory"]


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ("app.missing", "expected package.module:attribute"),
        ("app:missing", "has no attribute 'missing'"),
        ("app:count", "is a int, not a BusApp"),
        ("app:empty", "declares no endpoints"),
        ("app:mistaken", "retry_for names ['ReleaseStock'], which it does not handle"),
        ("app:unreadable", "CountStock is version 2 but names no previous model"),
        ("nothere:app", "no module named '{package}.nothere'"),
        ("broken:app", "importing {package}.broken failed: No module named 'nosuchpackage'"),
        ("raising:app", "importing {package}.raising raised RuntimeError: no database"),
    ],
)
def test_a_reference_that_names_no_app_is_a_configuration_error_saying_what_was_tried(
    package: str, attribute: str, message: str
) -> None:
    reference = f"{package}.{attribute}"
    settings = resolve_settings(environ={"BUS_APP": reference}, local_file=None)
    with pytest.raises(ConfigurationError) as raised:
        configured_app(settings)
    text = str(raised.value)
    assert text.startswith(f"BUS_APP={reference} from the environment")
    assert message.format(package=package) in text


@pytest.mark.parametrize("reference", ["", ":app", "module:", "module:not-an-identifier"])
def test_a_malformed_reference_is_refused(reference: str) -> None:
    with pytest.raises(ConfigurationError, match=r"expected package\.module:attribute"):
        load_app(reference)


def test_a_missing_top_level_package_is_named() -> None:
    with pytest.raises(ConfigurationError, match="no module named 'nosuchshop'"):
        load_app("nosuchshop.app:app")
