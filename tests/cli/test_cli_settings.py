"""The CLI's settings and app: resolved like everywhere else, never a silent fallback."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.cli import main
from shared.local.azurite import AzuriteEndpoints
from shared.resources import RESOURCES_FILE
from tests.conftest import unique_name

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``bus <args>`` from an empty folder with no storage settings in the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("AzureWebJobsStorage", "BUS_STORAGE_SETTING", "BUS_APP"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--no-progress", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_no_connection_configured_is_a_configuration_error_not_the_emulator(bus: Run) -> None:
    code, _, err = bus("status")
    assert code == 3
    assert "connection setting AzureWebJobsStorage (named by the defaults) is not set" in err
    assert "UseDevelopmentStorage=true" in err


def test_a_setting_name_nothing_sets_is_an_error(bus: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    code, _, err = bus("--setting", "AzureWebJobStorage", "status")
    assert code == 3
    assert "connection setting AzureWebJobStorage (named by the command line) is not set" in err


@pytest.mark.azurite
def test_the_connection_is_read_from_local_settings_json(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    values = {"ShopStorage": azurite.connection_string, "BUS_STORAGE_SETTING": "ShopStorage"}
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": values}))
    code, out, _ = bus("provision")
    assert code == 0, out
    code, out, _ = bus("status", "--json")
    assert code == 0
    assert "orders" in json.loads(out)["endpoints"]


def test_bus_resources_prints_the_repository_file_for_the_sample_app(bus: Run) -> None:
    code, out, _ = bus("resources")
    assert code == 0
    assert out == RESOURCES_FILE.read_text()


def test_a_bus_app_that_cannot_be_loaded_exits_3_naming_it(bus: Run) -> None:
    code, _, err = bus("--app", "nosuchshop.app:app", "resources")
    assert code == 3
    assert "BUS_APP=nosuchshop.app:app from the command line: no module named 'nosuchshop'" in err


def test_send_help_lists_the_command_types_of_the_app_named_by_bus_app(
    bus: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package = unique_name("shop")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "app.py").write_text(
        "from shared.bus import BusApp, Command\n"
        "app = BusApp()\n"
        "class ReserveStock(Command):\n"
        "    partition_by = 'sku'\n"
        "    sku: str\n"
        "app.endpoint('inventory').handles(ReserveStock)(lambda ctx, cmd: None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("BUS_APP", f"{package}.app:app")
    with pytest.raises(SystemExit) as exited:
        main(["send", "--help"])
    assert exited.value.code == 0
    assert "Types of the app: ReserveStock\n" in capsys.readouterr().out
