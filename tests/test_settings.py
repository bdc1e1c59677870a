"""Connection settings follow the Azure Functions conventions."""

from __future__ import annotations

import pytest

from shared.errors import ConfigurationError
from shared.settings import DEV_CONNECTION_STRING, load_storage_settings, parse_connection_string


def test_development_storage_means_the_local_emulator() -> None:
    settings = load_storage_settings({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})
    assert settings.connection_string == DEV_CONNECTION_STRING
    assert not settings.uses_identity


def test_a_connection_string_is_used_as_given_and_never_described_with_its_key() -> None:
    value = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0PT0=;"
    settings = load_storage_settings({"AzureWebJobsStorage": value})
    assert settings.connection_string == value
    assert "c2VjcmV0" not in settings.describe()
    assert parse_connection_string(value)["AccountKey"] == "c2VjcmV0PT0="


def test_identity_based_service_uris() -> None:
    settings = load_storage_settings(
        {
            "Bus__blobServiceUri": "https://a.blob.core.windows.net",
            "Bus__queueServiceUri": "https://a.queue.core.windows.net",
            "Bus__tableServiceUri": "https://a.table.core.windows.net",
            "Bus__credential": "managedidentity",
            "Bus__clientId": "1234",
        },
        setting="Bus",
    )
    assert settings.uses_identity
    assert settings.managed_identity
    assert settings.client_id == "1234"
    assert settings.table_service_uri == "https://a.table.core.windows.net"


def test_account_name_alone_derives_the_public_endpoints() -> None:
    settings = load_storage_settings({"AzureWebJobsStorage__accountName": "acct"})
    assert settings.blob_service_uri == "https://acct.blob.core.windows.net"
    assert settings.queue_service_uri == "https://acct.queue.core.windows.net"
    assert not settings.managed_identity


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "no storage connection configured"),
        ({"AzureWebJobsStorage__blobServiceUri": "https://a"}, "missing: queue, table"),
        ({"AzureWebJobsStorage": "not a connection string"}, "no '='"),
        ({"AzureWebJobsStorage": "Foo=bar"}, "not a storage connection string"),
        (
            {"AzureWebJobsStorage__accountName": "a", "AzureWebJobsStorage__credential": "cli"},
            "credential",
        ),
    ],
)
def test_bad_settings_fail_with_a_message_naming_the_fix(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_storage_settings(environ)
