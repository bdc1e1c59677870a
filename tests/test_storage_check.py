"""The start-up storage check says which of the usual causes stops the app, within seconds."""

from __future__ import annotations

import time

import pytest

from lab.host.process import free_port
from lab.local.azurite import AzuriteEndpoints
from shared.settings import DEV_KEY, StorageSettings
from shared.storage_check import ResourcesMissing, StorageUnavailable, check_storage_ready
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import unique_name


async def test_missing_queues_say_run_bus_provision_unless_provisioning_is_next() -> None:
    account = MemoryStorageAccount()
    await account.queue("orders").create_if_missing()
    with pytest.raises(ResourcesMissing) as raised:
        await check_storage_ready(account, ["orders", "billing"], describe="memory")
    assert str(raised.value) == ("resources missing in memory: queues billing; run `bus provision`")
    await check_storage_ready(account, ["billing"], describe="memory", require_resources=False)


async def test_an_account_nobody_listens_on_is_reported_unreachable_within_the_bound() -> None:
    port = free_port()
    connection = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={DEV_KEY};QueueEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        f"TableEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )
    started = time.monotonic()
    async with AzureStorageAccount(StorageSettings(connection)) as account:
        with pytest.raises(StorageUnavailable, match="storage unreachable: nowhere"):
            await check_storage_ready(account, ["orders"], describe="nowhere", seconds=2)
    assert time.monotonic() - started < 10


@pytest.mark.azurite
async def test_a_wrong_key_is_reported_as_refused(azurite: AzuriteEndpoints) -> None:
    wrong = azurite.connection_string.replace(DEV_KEY, "d3Jvbmcga2V5")
    async with AzureStorageAccount(StorageSettings(wrong)) as account:
        with pytest.raises(StorageUnavailable) as raised:
            await check_storage_ready(account, [unique_name("q")], describe="azurite")
    message = str(raised.value)
    assert message.startswith("storage refused the request: azurite:")
    assert "403" in message
    assert "account key" in message
