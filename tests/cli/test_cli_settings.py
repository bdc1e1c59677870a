"""The CLI's settings and app: resolved like everywhere else, never a silent fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.cli import main
from shared.resources import RESOURCES_FILE, resources_for, resources_json
from tests.cli.in_process import Run, in_process
from tests.conftest import sample_resources, unique_name


@pytest.fixture
def bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``bus <args>`` from an empty folder with no storage settings in the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("AzureWebJobsStorage", "BUS_STORAGE_SETTING", "BUS_APP"):
        monkeypatch.delenv(name, raising=False)

    return in_process(capsys, "--no-progress")


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
    (tmp_path / "infra").mkdir()
    (tmp_path / RESOURCES_FILE).write_text(resources_json(sample_resources()))
    code, out, _ = bus("provision")
    assert code == 0, out
    code, out, _ = bus("status", "--json")
    assert code == 0
    assert "orders" in json.loads(out)["endpoints"]


def test_bus_resources_prints_the_resources_file_of_the_sample_app_when_bus_app_is_unset(
    bus: Run,
) -> None:
    code, out, _ = bus("resources")
    assert code == 0
    assert out == resources_json(sample_resources())


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


SHOP_APP = (
    "from shared.bus import BusApp, Command\n"
    "app = BusApp()\n"
    "class ReserveStock(Command):\n"
    "    partition_by = 'sku'\n"
    "    sku: str\n"
    "app.endpoint('inventory').handles(ReserveStock)(lambda ctx, cmd: None)\n"
)


def shop_package(folder: Path) -> str:
    """A package of the user's in ``folder`` (a fresh name: modules are cached)."""
    package = unique_name("shop")
    (folder / package).mkdir()
    (folder / package / "__init__.py").write_text("")
    (folder / package / "app.py").write_text(SHOP_APP)
    return package


@pytest.mark.azurite
def test_provision_checks_the_resources_file_bus_resources_wrote_in_the_current_folder(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bus resources > infra/resources.json`` writes to the current folder; ``bus provision``
    reads that file, not the one beside the installed library (which lists the sample's)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    app = f"{shop_package(tmp_path)}.app:app"
    values = {"AzureWebJobsStorage": azurite.connection_string, "BUS_APP": app}
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": values}))
    code, out, _ = bus("resources")
    assert code == 0
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "resources.json").write_text(out)

    code, out, err = bus("provision")

    assert (code, out.strip()) == (0, "provisioned 2 queues, 6 containers, 4 tables"), err


@pytest.mark.azurite
def test_provision_without_a_resources_file_says_where_it_looked_and_what_to_run(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    code, _, err = bus("--connection-string", azurite.connection_string, "provision")
    assert code == 3
    assert f"no resources file {tmp_path / 'infra' / 'resources.json'}: run " in err
    assert "`bus resources > infra/resources.json` in the function app's folder" in err


@pytest.mark.azurite
def test_provision_resources_file_names_another_file(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "deploy" / "names.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(resources_json(resources_for(["orders"])))
    args = ("--connection-string", azurite.connection_string, "provision")

    code, _, err = bus(*args, "--resources-file", str(elsewhere))
    assert code == 3
    assert f"{elsewhere} does not match the app" in err

    elsewhere.write_text(resources_json(sample_resources()))
    assert bus(*args, "--resources-file", str(elsewhere))[0] == 0


@pytest.mark.azurite
def test_the_connection_string_is_read_from_a_file_without_a_warning(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    secret = tmp_path / "storage.secret"
    secret.write_text(azurite.connection_string + "\n")
    (tmp_path / "infra").mkdir()
    (tmp_path / RESOURCES_FILE).write_text(resources_json(sample_resources()))
    code, out, err = bus("--connection-string-file", str(secret), "provision")
    assert code == 0, err
    assert "process list" not in err
    assert azurite.connection_string not in out + err


@pytest.mark.azurite
def test_the_connection_string_from_the_environment_needs_no_option(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    (tmp_path / "infra").mkdir()
    (tmp_path / RESOURCES_FILE).write_text(resources_json(sample_resources()))
    code, _, err = bus("provision")
    assert code == 0, err
    assert "process list" not in err


@pytest.mark.azurite
def test_a_connection_string_on_the_command_line_works_but_warns(
    bus: Run, azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    (tmp_path / "infra").mkdir()
    (tmp_path / RESOURCES_FILE).write_text(resources_json(sample_resources()))
    code, _, err = bus("--connection-string", azurite.connection_string, "provision")
    assert code == 0, err
    assert "--connection-string puts the storage account key in the process list" in err
    assert "--connection-string-file" in err
    assert azurite.connection_string not in err


def test_an_unreadable_or_empty_connection_string_file_is_a_configuration_error(
    bus: Run, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere.secret"
    code, _, err = bus("--connection-string-file", str(missing), "status")
    assert code == 3
    assert f"cannot read --connection-string-file {missing}: No such file or directory" in err
    empty = tmp_path / "empty.secret"
    empty.write_text("\n")
    code, _, err = bus("--connection-string-file", str(empty), "status")
    assert code == 3
    assert "is empty" in err


def test_a_malformed_connection_string_is_refused_without_quoting_it(
    bus: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stray ';' splits the key off: the part without '=' is the key itself.
    malformed = "AccountName=acct;AccountKey=abc;ZGVmc2VjcmV0a2V5bWF0ZXJpYWw"
    secret = tmp_path / "storage.secret"
    secret.write_text(malformed)
    # Read from the option or from a setting, it is the same configuration error.
    code, _, err = bus("--connection-string-file", str(secret), "status")
    assert code == 3, err
    assert "ZGVmc2VjcmV0a2V5bWF0ZXJpYWw" not in err
    assert "part 3 has no '='" in err
    monkeypatch.setenv("AzureWebJobsStorage", malformed)
    code, _, err = bus("status")
    assert code == 3, err
    assert "ZGVmc2VjcmV0a2V5bWF0ZXJpYWw" not in err
    assert "part 3 has no '='" in err


def test_both_connection_options_at_once_are_a_usage_error(bus: Run, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as usage:
        bus("--connection-string", "x", "--connection-string-file", str(tmp_path / "f"), "status")
    assert usage.value.code == 2
