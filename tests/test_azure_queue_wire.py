"""What the Azure queue adapter puts on the wire, checked with the raw SDK on Azurite."""

from __future__ import annotations

import base64

import pytest
from azure.storage.queue.aio import QueueClient

from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import unique_name

pytestmark = pytest.mark.azurite


async def test_messages_travel_base64_encoded_like_the_functions_host_expects(
    azurite: AzuriteEndpoints,
) -> None:
    name = unique_name("wire")
    async with AzureStorageAccount(StorageSettings(azurite.connection_string)) as account:
        queue = account.queue(name)
        await queue.create_if_missing()
        raw = QueueClient.from_connection_string(azurite.connection_string, name)
        async with raw:
            await queue.send('{"id": "é"}')
            [peeked] = [m async for m in raw.receive_messages()]
            assert base64.b64decode(peeked.content).decode() == '{"id": "é"}'

            # A producer outside the bus may send plain text; it must still be received so
            # that the pipeline can reject it as malformed rather than crash the batch.
            await raw.send_message("not base64 {")
            messages = await queue.receive(32, visibility_timeout=30)
            assert "not base64 {" in [m.content for m in messages]
        await queue.delete_queue()
