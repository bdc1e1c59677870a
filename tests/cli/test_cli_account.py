"""``bus``, the audit and the bulk jobs name the storage account they use and where its
connection came from, and refuse a connection whose settings are ambiguous: run as real
processes, from a project folder of their own, against Azurite.

The refused configurations are set the way a user sets them by mistake: the sample
``local.settings.json`` copied into the project while Azure settings are exported in the
shell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.settings import DEV_ACCOUNT, DEV_KEY
from tests.conftest import SAMPLE_APP, sample_provider_settings

pytestmark = pytest.mark.azurite

AZURE_URIS = {
    "AzureWebJobsStorage__blobServiceUri": "https://prodshop.blob.core.windows.net",
    "AzureWebJobsStorage__queueServiceUri": "https://prodshop.queue.core.windows.net",
    "AzureWebJobsStorage__tableServiceUri": "https://prodshop.table.core.windows.net",
}
"""What a user exports in the shell to reach the Azure account (nothing here connects)."""

AZURE_KEY = "cHJvZHNob3Atc2VjcmV0LWtleQ=="
AZURE_CONNECTION_STRING = (
    f"DefaultEndpointsProtocol=https;AccountName=prodshop;AccountKey={AZURE_KEY};"
    "EndpointSuffix=core.windows.net"
)


def run(
    folder: Path, *args: str, environ: dict[str, str] | None = None, module: str = "shared.cli"
) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` in ``folder``, with no storage or bus settings in the
    environment but ``environ`` (and the sample's, its app and its payment provider)."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("BUS_", "AzureWebJobsStorage", "PYTEST_"))
    }
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=folder,
        env={
            **inherited,
            "PYTHONPATH": str(REPO_ROOT),
            APP_SETTING: SAMPLE_APP,
            **sample_provider_settings(),
            **(environ or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def copy_sample_settings(folder: Path) -> Path:
    """``cp local.settings.sample.json local.settings.json``, as the walkthrough says."""
    copied = folder / "local.settings.json"
    shutil.copy(REPO_ROOT / "local.settings.sample.json", copied)
    return copied


def write_settings(path: Path, values: dict[str, str]) -> Path:
    path.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
    return path


def emulator_endpoint(azurite: AzuriteEndpoints) -> str:
    return f"{azurite.blob}/{DEV_ACCOUNT}"


def assert_no_secret(result: subprocess.CompletedProcess[str]) -> None:
    for secret in (DEV_KEY, AZURE_KEY, "AccountKey", "sig="):
        assert secret not in result.stdout + result.stderr


# --- the account line, for each source ------------------------------------------------------


def test_the_account_from_the_environment_is_named_before_the_work_and_in_json(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    environ = {"AzureWebJobsStorage": azurite.connection_string}
    assert run(sample_project, "provision", environ=environ).returncode == 0

    result = run(sample_project, "status", "--json", environ=environ)

    assert result.returncode == 0, result.stderr
    line = (
        f"bus: account {DEV_ACCOUNT} ({emulator_endpoint(azurite)}) "
        "from AzureWebJobsStorage in the environment"
    )
    assert result.stderr.splitlines()[0] == line
    assert json.loads(result.stdout)["account"] == {
        "name": DEV_ACCOUNT,
        "endpoint": emulator_endpoint(azurite),
        "setting": "AzureWebJobsStorage",
        "source": "environment",
    }
    assert_no_secret(result)


def test_a_send_and_an_endpoints_state_name_the_account(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    environ = {"AzureWebJobsStorage": azurite.connection_string}
    assert run(sample_project, "provision", environ=environ).returncode == 0
    body = json.dumps({"order_id": "acct-1", "customer": "ada", "amount_cents": 100})

    sent = run(
        sample_project, "send", "PlaceOrder", "--key", "acct-1", "--body", body, environ=environ
    )
    state = run(sample_project, "state", "orders", "acct-1", "--json", environ=environ)

    assert sent.returncode == 0, sent.stderr
    assert sent.stderr.splitlines()[0].startswith(f"bus: account {DEV_ACCOUNT} (")
    assert len(json.loads(sent.stdout)["message_ids"]) == 1
    assert state.returncode == 1  # nothing processed yet: the partition has no rows
    assert state.stderr.splitlines()[0].startswith(f"bus: account {DEV_ACCOUNT} (")


def test_the_account_from_the_settings_file_is_named_by_the_file(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    write_settings(
        sample_project / "local.settings.json", {"AzureWebJobsStorage": azurite.connection_string}
    )
    assert run(sample_project, "provision").returncode == 0

    result = run(sample_project, "cleanup", "--json")

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"bus: account {DEV_ACCOUNT} ({emulator_endpoint(azurite)}) "
        "from AzureWebJobsStorage in local.settings.json"
    )
    assert json.loads(result.stdout)["account"] == {
        "name": DEV_ACCOUNT,
        "endpoint": emulator_endpoint(azurite),
        "setting": "AzureWebJobsStorage",
        "source": "local.settings.json",
    }
    assert_no_secret(result)


def test_a_settings_file_given_with_an_option_is_named_by_its_path(
    sample_project: Path, azurite: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("config") / "shop.settings.json"
    write_settings(
        elsewhere,
        {"ShopStorage": azurite.connection_string, "BUS_STORAGE_SETTING": "ShopStorage"},
    )

    result = run(sample_project, "--settings-file", str(elsewhere), "status", "--json")

    assert result.returncode == 0, result.stderr
    assert f"from ShopStorage in {elsewhere}\n" in result.stderr
    account = json.loads(result.stdout)["account"]
    assert (account["setting"], account["source"]) == ("ShopStorage", str(elsewhere))


def test_a_connection_string_file_is_named_as_the_command_line_option(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    secret = sample_project / "storage.secret"
    secret.write_text(azurite.connection_string)
    option = f"--connection-string-file {secret}"
    assert run(sample_project, *option.split(), "provision").returncode == 0

    result = run(sample_project, *option.split(), "status", "--json")

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"bus: account {DEV_ACCOUNT} ({emulator_endpoint(azurite)}) from {option} "
        "on the command line"
    )
    assert json.loads(result.stdout)["account"] == {
        "name": DEV_ACCOUNT,
        "endpoint": emulator_endpoint(azurite),
        "setting": option,
        "source": "command line",
    }
    assert_no_secret(result)


def test_a_command_without_json_says_the_account_on_stderr_only(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    environ = {"AzureWebJobsStorage": azurite.connection_string}

    result = run(sample_project, "provision", environ=environ)

    assert result.returncode == 0, result.stderr
    assert f"bus: account {DEV_ACCOUNT} (" in result.stderr
    assert "account" not in result.stdout


def test_bus_resources_touches_no_storage_and_names_no_account(sample_project: Path) -> None:
    result = run(sample_project, "resources")
    assert result.returncode == 0, result.stderr
    assert "account" not in result.stderr


# --- what a confused user sets: refused, saying which is where -------------------------------


def test_a_copied_settings_file_beside_azure_uris_in_the_shell_is_refused(
    sample_project: Path,
) -> None:
    copy_sample_settings(sample_project)

    result = run(sample_project, "status", environ=AZURE_URIS)

    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr == (
        "bus: configuration: ambiguous storage connection: AzureWebJobsStorage is set as a "
        "connection string in local.settings.json, and its account is also set by location "
        "(AzureWebJobsStorage__blobServiceUri, AzureWebJobsStorage__queueServiceUri, "
        "AzureWebJobsStorage__tableServiceUri in the environment); the two may name different "
        "accounts: keep one of them (a copied local.settings.json brings "
        "AzureWebJobsStorage=UseDevelopmentStorage=true), or give the connection on the "
        "command line\n"
    )


def test_a_copied_settings_file_beside_an_azure_connection_string_in_the_shell_is_refused(
    sample_project: Path,
) -> None:
    copy_sample_settings(sample_project)

    result = run(sample_project, "status", environ={"AzureWebJobsStorage": AZURE_CONNECTION_STRING})

    assert result.returncode == 3
    assert result.stderr == (
        "bus: configuration: ambiguous storage connection: AzureWebJobsStorage is set in more "
        "than one source (in the environment: AzureWebJobsStorage; in local.settings.json: "
        "AzureWebJobsStorage (a different value)), so which account is meant cannot be told: "
        "set the connection in one source only (remove it from local.settings.json, or unset "
        "it in the environment)\n"
    )
    assert_no_secret(result)


def test_connection_parts_split_between_the_shell_and_the_settings_file_are_refused(
    sample_project: Path,
) -> None:
    write_settings(
        sample_project / "local.settings.json",
        {"AzureWebJobsStorage__credential": "managedidentity"},
    )

    result = run(sample_project, "status", environ={"AzureWebJobsStorage__accountName": "prod"})

    assert result.returncode == 3
    assert (
        "(in the environment: AzureWebJobsStorage__accountName; in local.settings.json: "
        "AzureWebJobsStorage__credential)"
    ) in result.stderr


def test_a_connection_string_and_an_account_name_in_the_same_source_are_refused(
    sample_project: Path,
) -> None:
    environ = {
        "AzureWebJobsStorage": AZURE_CONNECTION_STRING,
        "AzureWebJobsStorage__accountName": "otheraccount",
    }

    result = run(sample_project, "status", environ=environ)

    assert result.returncode == 3
    assert (
        "AzureWebJobsStorage is set as a connection string in the environment, and its account "
        "is also set by location (AzureWebJobsStorage__accountName in the environment)"
    ) in result.stderr
    assert_no_secret(result)


def test_a_settings_file_repeating_the_environment_is_not_ambiguous(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    """The Functions host copies the file's Values into the environment: both then agree."""
    values = {"AzureWebJobsStorage": azurite.connection_string}
    write_settings(sample_project / "local.settings.json", values)

    result = run(sample_project, "provision", environ=values)

    assert result.returncode == 0, result.stderr
    assert "from AzureWebJobsStorage in the environment\n" in result.stderr


def test_a_connection_given_on_the_command_line_overrides_an_ambiguous_rest(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    copy_sample_settings(sample_project)
    secret = sample_project / "storage.secret"
    secret.write_text(azurite.connection_string)

    result = run(
        sample_project, "--connection-string-file", str(secret), "provision", environ=AZURE_URIS
    )

    assert result.returncode == 0, result.stderr
    assert f"from --connection-string-file {secret} on the command line\n" in result.stderr


# --- the audit and the bulk jobs say the same -------------------------------------------------


def test_the_audit_export_names_the_account_like_bus(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    environ = {"AzureWebJobsStorage": azurite.connection_string}
    assert run(sample_project, "provision", environ=environ).returncode == 0
    out = sample_project / "export"

    result = run(
        sample_project, "export", "--out", str(out), "--quiet",
        environ=environ, module="shared.audit",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"audit: account {DEV_ACCOUNT} ({emulator_endpoint(azurite)}) "
        "from AzureWebJobsStorage in the environment"
    )
    assert_no_secret(result)


def test_the_audit_refuses_the_copied_settings_file_beside_azure_uris(
    sample_project: Path,
) -> None:
    copy_sample_settings(sample_project)
    out = sample_project / "export"

    result = run(
        sample_project, "export", "--out", str(out), environ=AZURE_URIS, module="shared.audit"
    )

    assert result.returncode == 2  # the audit's code for anything that stopped it
    assert "error: ambiguous storage connection: AzureWebJobsStorage is set as a " in result.stderr


def test_the_bulk_job_names_the_account_before_it_starts(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    environ = {"AzureWebJobsStorage": azurite.connection_string}
    send = ["send", "--type", "FireAt", "--key-column", "game_id", "--input", "x.parquet"]

    # A job name the bulk job refuses stops it before Spark starts, after the account line.
    result = run(sample_project, *send, "--job", "bad:name", environ=environ, module="shared.bulk")

    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"bulk: account {DEV_ACCOUNT} ({emulator_endpoint(azurite)}) "
        "from AzureWebJobsStorage in the environment"
    )
    assert "invalid job name 'bad:name'" in result.stderr
    assert_no_secret(result)
