"""The SDK private attributes the adapter relies on are where it expects them, in the SDK
versions requirements.txt pins; a moved one is reported with its name and the SDK version."""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.pipeline import AsyncPipeline, PipelineContext, PipelineRequest
from azure.core.rest import HttpRequest

from shared.settings import DEV_CONNECTION_STRING, StorageSettings
from shared.stores.azure import AzureStorageAccount, sdk_internals
from shared.stores.azure.sdk_internals import SdkInternalsChanged, installed

REPO = Path(__file__).resolve().parents[1]
ADAPTER = REPO / "shared" / "stores" / "azure"
PINNED_SDKS = (
    "azure-core",
    "azure-storage-blob",
    "azure-storage-queue",
    "azure-data-tables",
    "azure-identity",
    "aiohttp",
)


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        name, separator, pinned = line.split("#", 1)[0].strip().partition("==")
        if separator:
            found[name.strip().lower()] = pinned.strip()
    return found


@pytest.fixture
async def account() -> AsyncIterator[AzureStorageAccount]:
    # Building clients opens no connection: no emulator needed.
    built = AzureStorageAccount(StorageSettings(DEV_CONNECTION_STRING))
    try:
        yield built
    finally:
        await built.close()


@pytest.mark.parametrize("distribution", PINNED_SDKS)
def test_the_installed_sdk_is_the_pinned_one(distribution: str) -> None:
    pinned = pins().get(distribution)
    assert pinned is not None, f"requirements.txt must pin {distribution}=="
    assert installed(distribution) == pinned, (
        f"{distribution} {installed(distribution)} is installed but requirements.txt pins "
        f"{pinned}: check shared/stores/azure/sdk_internals.py against the new version "
        "(this test module does) before moving the pin"
    )


async def test_the_blob_pipeline_is_the_clients_async_pipeline(
    account: AzureStorageAccount,
) -> None:
    client = account._blobs.get_container_client("tokens")
    pipeline = sdk_internals.blob_pipeline(client)
    assert isinstance(pipeline, AsyncPipeline), (
        f"azure-storage-blob {installed('azure-storage-blob')}: ContainerClient._pipeline is "
        f"a {type(pipeline).__name__}, not an azure.core AsyncPipeline"
    )


async def test_the_blob_credential_policy_signs_a_request_with_the_account_key(
    account: AzureStorageAccount,
) -> None:
    client = account._blobs.get_container_client("tokens")
    policy = sdk_internals.blob_credential_policy(client)
    request = PipelineRequest(
        HttpRequest("DELETE", "http://127.0.0.1/devstoreaccount1/tokens/x"), PipelineContext(None)
    )
    policy.on_request(request)
    assert request.http_request.headers["Authorization"].startswith("SharedKey devstoreaccount1:")


async def test_the_table_send_request_is_the_generated_clients_raw_send(
    account: AzureStorageAccount,
) -> None:
    client = account._tables.get_table_client("ingress")
    send = sdk_internals.table_send_request(client)
    owner: Any = getattr(send, "__self__", None)
    assert owner is client._client, (
        f"azure-data-tables {installed('azure-data-tables')}: TableClient._client.send_request "
        "is no longer the generated client's bound method"
    )
    parameters = inspect.signature(send).parameters
    assert "stream" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def test_the_queue_retry_policy_is_an_async_exponential_retry() -> None:
    policy = sdk_internals.queue_retry_policy()
    assert policy.__name__ == "ExponentialRetry"
    instance = policy(initial_backoff=1, increment_base=2, retry_total=3)
    assert inspect.iscoroutinefunction(instance.send), (
        f"azure-storage-queue {installed('azure-storage-queue')}: "
        "_shared.policies_async.ExponentialRetry.send is not async any more"
    )


@pytest.mark.parametrize(
    ("access", "attribute", "distribution"),
    [
        (sdk_internals.blob_pipeline, "ContainerClient._pipeline", "azure-storage-blob"),
        (
            sdk_internals.blob_credential_policy,
            "ContainerClient._credential_policy",
            "azure-storage-blob",
        ),
        (
            sdk_internals.table_send_request,
            "TableClient._client",
            "azure-data-tables",
        ),
    ],
)
def test_a_moved_attribute_is_named_with_the_sdk_version(
    access: Any, attribute: str, distribution: str
) -> None:
    # An object without the attribute stands for a new SDK version that moved it.
    with pytest.raises(SdkInternalsChanged) as raised:
        access(SimpleNamespace())
    message = str(raised.value)
    assert attribute in message
    assert f"{distribution} {installed(distribution)}" in message
    assert f"azure-core {installed('azure-core')}" in message


def test_no_other_adapter_module_reaches_into_the_sdk() -> None:
    """Private SDK access stays in sdk_internals, where the checks above watch it."""
    private = re.compile(r"\._pipeline\b|\._client\._|\._shared\b|\._generated\b")
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(ADAPTER.glob("*.py"))
        if path.name != "sdk_internals.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert offenders == []
