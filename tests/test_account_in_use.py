"""The account line names the account and its blob endpoint for every form of connection,
and nothing that may be a secret: no key, no SAS, no user info, no control character."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.account_in_use import AccountInUse
from shared.connection_sources import COMMAND_LINE, ConnectionSource
from shared.settings import (
    DEV_KEY,
    STORAGE_SETTING_NAME,
    StorageSettings,
    load_storage_settings,
    resolve_settings,
)

SAS = "sv=2024-01-01&ss=bqt&sig=c2VjcmV0c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("values", "name", "endpoint"),
    [
        (
            {"AzureWebJobsStorage": "UseDevelopmentStorage=true"},
            "devstoreaccount1",
            "http://127.0.0.1:10000/devstoreaccount1",
        ),
        (
            {
                "AzureWebJobsStorage": "DefaultEndpointsProtocol=https;AccountName=shop;"
                f"AccountKey={DEV_KEY};EndpointSuffix=core.chinacloudapi.cn"
            },
            "shop",
            "https://shop.blob.core.chinacloudapi.cn",
        ),
        (
            {
                "AzureWebJobsStorage": "BlobEndpoint=https://sasacct.blob.core.windows.net/;"
                f"QueueEndpoint=https://sasacct.queue.core.windows.net/;SharedAccessSignature={SAS}"
            },
            "sasacct",
            "https://sasacct.blob.core.windows.net",
        ),
        (
            {"AzureWebJobsStorage__accountName": "idacct"},
            "idacct",
            "https://idacct.blob.core.windows.net",
        ),
        (
            {
                f"AzureWebJobsStorage__{kind}ServiceUri": (
                    f"https://user:pw@uriacct.{kind}.core.windows.net:443/?{SAS}#frag"
                )
                for kind in ("blob", "queue", "table")
            },
            "uriacct",
            "https://uriacct.blob.core.windows.net:443",
        ),
        (
            {
                f"AzureWebJobsStorage__{kind}ServiceUri": f"https://127.0.0.1:{port}/emuacct"
                for kind, port in (("blob", 1), ("queue", 2), ("table", 3))
            },
            "emuacct",
            "https://127.0.0.1:1/emuacct",
        ),
    ],
)
def test_every_form_of_connection_names_its_account_and_blob_endpoint_only(
    values: dict[str, str], name: str, endpoint: str
) -> None:
    account = AccountInUse.of(load_storage_settings(values))

    assert (account.name, account.endpoint) == (name, endpoint)
    said = account.line() + json.dumps(account.as_json())
    for secret in (DEV_KEY, "sig=", "c2VjcmV0", "pw@", "frag"):
        assert secret not in said


def test_the_line_names_the_setting_and_the_source(tmp_path: Path) -> None:
    local = tmp_path / "local.settings.json"
    local.write_text(json.dumps({"Values": {"AzureWebJobsStorage__accountName": "shop"}}))

    storage = resolve_settings(environ={}, local_file=local).storage()

    assert AccountInUse.of(storage).line() == (
        f"account shop (https://shop.blob.core.windows.net) from "
        f"AzureWebJobsStorage__accountName in {local}"
    )


def test_a_control_character_in_a_name_cannot_start_a_line_of_its_own(tmp_path: Path) -> None:
    forged = "Shop\nbus: account real (https://real.blob.core.windows.net)"
    local = tmp_path / "local.settings.json"
    local.write_text(json.dumps({"Values": {f"{forged}__accountName": "shop"}}))

    storage = resolve_settings({STORAGE_SETTING_NAME: forged}, environ={}, local_file=local)

    line = AccountInUse.of(storage.storage()).line()
    assert "\n" not in line
    assert "Shop\\nbus: account real" in line


def test_a_uri_that_does_not_parse_is_shown_as_unknown_not_a_crash() -> None:
    storage = StorageSettings(
        blob_service_uri="https://acct.blob.core.windows.net:notaport",
        source=ConnectionSource("--x", COMMAND_LINE),
    )
    assert AccountInUse.of(storage).line() == "account ? (?) from --x on the command line"


def test_settings_built_by_a_caller_name_no_source() -> None:
    account = AccountInUse.of(StorageSettings(connection_string="AccountName=a;AccountKey=k"))
    assert account.line() == "account a (https://a.blob.core.windows.net)"
    assert account.as_json()["source"] is None
