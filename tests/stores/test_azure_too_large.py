"""Table Storage's size refusals, as the service gives them, become ``TooLarge`` at the
adapter edge: inside a transaction too, where it refuses the whole batch (nothing is
written), so the pipeline may park the message whose commit it was (issue 35)."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError
from azure.data.tables.aio import TableServiceClient

from lab.local.azurite import AzuriteEndpoints
from shared.errors import StorageError, TooLarge, TransactionFailed
from shared.stores.azure.errors import from_status, translate
from tests.conftest import unique_name

pytestmark = pytest.mark.azurite

OVER_ONE_PROPERTY = "x" * 40_000
"""80,000 bytes in UTF-16, over the 64 KiB a property holds."""


async def test_the_service_refusing_a_property_over_64_kib_is_too_large(
    azurite: AzuriteEndpoints,
) -> None:
    async with TableServiceClient.from_connection_string(azurite.connection_string) as service:
        table = await service.create_table(unique_name("big"))
        entity = {"PartitionKey": "p", "RowKey": "r", "data": OVER_ONE_PROPERTY}
        with pytest.raises(HttpResponseError) as alone:
            await table.create_entity(entity)
        with pytest.raises(HttpResponseError) as batched:
            await table.submit_transaction([("create", {**entity, "RowKey": "b"})])
        assert [e async for e in table.list_entities()] == []

    refused = translate(alone.value, "table big")
    assert isinstance(refused, TooLarge)
    assert "PropertyValueTooLarge" in str(refused)
    assert batched.value.status_code == 400
    code = str(getattr(batched.value, "error_code", ""))
    assert code == "PropertyValueTooLarge"
    # How the adapter's own batch reader reads that part of a transaction's answer: the
    # whole request refused, not one operation losing a race (TransactionFailed).
    part = from_status(400, code, "operation 0 of a transaction")
    assert isinstance(part, TooLarge)
    assert not isinstance(part, TransactionFailed)


@pytest.mark.parametrize("code", ["EntityTooLarge", "PropertyValueTooLarge", "RequestBodyTooLarge"])
def test_every_size_code_and_a_413_are_too_large(code: str) -> None:
    assert isinstance(from_status(400, code, "x"), TooLarge)
    assert isinstance(from_status(413, "", "x"), TooLarge)
    other = from_status(400, "InvalidInput", "x")
    assert isinstance(other, StorageError)
    assert not isinstance(other, TooLarge)
