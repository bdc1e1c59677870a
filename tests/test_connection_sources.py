"""The storage connection is taken whole from one source: which configurations are refused,
which are not, and what the refusal says (which setting is where, never a value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.config import build_config
from shared.connection_sources import COMMAND_LINE, ENVIRONMENT
from shared.errors import ConfigurationError
from shared.settings import DEV_CONNECTION_STRING, resolve_settings

KEY = "c2VjcmV0LWtleS1tYXRlcmlhbA=="
CONNECTION_STRING = f"DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={KEY}"
URIS = {
    f"AzureWebJobsStorage__{kind}ServiceUri": f"https://shop.{kind}.core.windows.net"
    for kind in ("blob", "queue", "table")
}
INFRA = {  # infra/app/function-app.bicep's identity-based group
    **URIS,
    "AzureWebJobsStorage__credential": "managedidentity",
    "AzureWebJobsStorage__clientId": "00000000-0000-0000-0000-000000000001",
}


def settings_file(folder: Path, values: dict[str, str]) -> Path:
    path = folder / "local.settings.json"
    path.write_text(json.dumps({"Values": values}))
    return path


def refusal(environ: dict[str, str], local: Path | None) -> str:
    settings = resolve_settings(environ=environ, local_file=local)
    with pytest.raises(ConfigurationError) as raised:
        settings.storage()
    message = str(raised.value)
    assert message.startswith("ambiguous storage connection: ")
    assert KEY not in message
    return message


def test_the_deployed_settings_are_not_ambiguous() -> None:
    storage = resolve_settings(environ=INFRA, local_file=None).storage()
    assert storage.blob_service_uri == "https://shop.blob.core.windows.net"
    assert storage.source is not None
    assert storage.source.origin == ENVIRONMENT


def test_a_connection_string_beside_the_deployed_group_is_refused_at_start_up() -> None:
    environ = {**INFRA, "AzureWebJobsStorage": CONNECTION_STRING}
    settings = resolve_settings(environ=environ, local_file=None)
    with pytest.raises(ConfigurationError, match="set as a connection string in the environment"):
        build_config(settings)


def test_a_credential_beside_a_connection_string_in_one_source_is_not_a_second_account() -> None:
    environ = {"AzureWebJobsStorage": CONNECTION_STRING, "AzureWebJobsStorage__clientId": "x"}
    storage = resolve_settings(environ=environ, local_file=None).storage()
    assert storage.connection_string == CONNECTION_STRING


def test_the_copied_sample_beside_uris_in_the_environment_names_each_place(
    tmp_path: Path,
) -> None:
    local = settings_file(tmp_path, {"AzureWebJobsStorage": "UseDevelopmentStorage=true"})
    message = refusal(URIS, local)
    assert f"AzureWebJobsStorage is set as a connection string in {local}" in message
    assert (
        "(AzureWebJobsStorage__blobServiceUri, AzureWebJobsStorage__queueServiceUri, "
        "AzureWebJobsStorage__tableServiceUri in the environment)"
    ) in message


def test_uris_in_the_file_beside_a_connection_string_in_the_environment(tmp_path: Path) -> None:
    local = settings_file(tmp_path, {"AzureWebJobsStorage__accountName": "other"})
    message = refusal({"AzureWebJobsStorage": CONNECTION_STRING}, local)
    assert "set as a connection string in the environment" in message
    assert f"(AzureWebJobsStorage__accountName in {local})" in message


def test_the_file_overriding_the_environment_differently_is_refused(tmp_path: Path) -> None:
    local = settings_file(tmp_path, {"AzureWebJobsStorage": "UseDevelopmentStorage=true"})
    message = refusal({"AzureWebJobsStorage": CONNECTION_STRING}, local)
    assert (
        f"(in the environment: AzureWebJobsStorage; in {local}: AzureWebJobsStorage "
        "(a different value))"
    ) in message
    assert f"remove it from {local}, or unset it in the environment" in message


def test_parts_from_both_sources_are_refused_even_when_they_agree_where_both_set_them(
    tmp_path: Path,
) -> None:
    local = settings_file(tmp_path, {**URIS, "AzureWebJobsStorage__clientId": "abc"})
    message = refusal(URIS, local)
    assert "AzureWebJobsStorage__blobServiceUri (the same value)" in message
    assert "AzureWebJobsStorage__clientId" in message


def test_a_file_repeating_the_environment_exactly_is_one_connection(tmp_path: Path) -> None:
    local = settings_file(tmp_path, {**INFRA, "BUS_APP": "shop.app:app"})
    storage = resolve_settings(environ=INFRA, local_file=local).storage()
    assert storage.source is not None
    assert storage.source.origin == ENVIRONMENT


def test_the_connection_named_by_the_setting_is_the_one_checked(tmp_path: Path) -> None:
    """Another connection's settings in both places concern another connection."""
    local = settings_file(tmp_path, {"AzureWebJobsStorage": "UseDevelopmentStorage=true"})
    environ = {"BUS_STORAGE_SETTING": "Shop", "Shop__accountName": "shop", **URIS}
    storage = resolve_settings(environ=environ, local_file=local).storage()
    assert storage.blob_service_uri == "https://shop.blob.core.windows.net"


def test_a_connection_on_the_command_line_overrides_an_ambiguous_rest(tmp_path: Path) -> None:
    local = settings_file(tmp_path, {"AzureWebJobsStorage": CONNECTION_STRING})
    settings = resolve_settings(
        {"AzureWebJobsStorage": "UseDevelopmentStorage=true"}, environ=URIS, local_file=local
    )
    storage = settings.storage()
    assert storage.connection_string == DEV_CONNECTION_STRING
    assert storage.source is not None
    assert (storage.source.setting, storage.source.origin) == ("AzureWebJobsStorage", COMMAND_LINE)
