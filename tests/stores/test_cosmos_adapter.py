"""The Cosmos DB adapter's edge: each SDK outcome as the project's error (a write without an
answer may have landed, a read without one changed nothing), TLS left unverified only for a
loopback account, the key never shown, sign-in with the app's identity without a key, and
items that someone else put in an endpoint's container."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos import exceptions

from shared.bus.state.damaged import DamagedRow
from shared.bus.state.document_rows import DocumentRows
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    InvalidValue,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    TooLarge,
)
from shared.settings import Settings, StorageTimeouts
from shared.stores.cosmos.database import CosmosDatabase, is_loopback
from shared.stores.cosmos.documents import CosmosDocuments
from shared.stores.cosmos.errors import from_status, translate, translated
from shared.stores.cosmos.settings import CosmosSettings
from tests.conftest import unique_name
from tests.cosmos import cosmos_database

KEY = "c2VjcmV0LWtleS1vZi10aGUtYWNjb3VudA=="


@pytest.mark.parametrize(
    ("status", "write", "expected"),
    [
        (409, True, AlreadyExists),
        (412, True, PreconditionFailed),
        (404, True, PreconditionFailed),  # a conditional write of an item that is gone
        (404, False, NotFound),
        (413, True, TooLarge),
        (429, True, StorageError),  # throttled: nothing was done
        (429, False, StorageError),
        (408, True, OutcomeUnknown),
        (503, True, OutcomeUnknown),
        (500, True, OutcomeUnknown),
        (503, False, OutcomeUnknown),
        (400, True, StorageError),
        (403, False, StorageError),
    ],
)
def test_each_status_is_the_project_s_error(
    status: int, write: bool, expected: type[Exception]
) -> None:
    error = from_status(status, "cosmos item 'p' of e", write=write)

    assert type(error) is expected
    assert "cosmos item 'p' of e" in str(error)


def test_no_answer_is_unknown_for_a_write_and_a_read() -> None:
    lost = ServiceResponseError("lost", error=aiohttp.ServerDisconnectedError())
    never_sent = ServiceRequestError("refused")
    answered = exceptions.CosmosHttpResponseError(status_code=409, message="exists")  # type: ignore[no-untyped-call]

    assert type(translate(lost, "w", write=True)) is OutcomeUnknown
    assert type(translate(lost, "r", write=False)) is OutcomeUnknown
    assert type(translate(never_sent, "w", write=True)) is OutcomeUnknown
    assert type(translate(answered, "w", write=True)) is AlreadyExists
    timed_out = exceptions.CosmosClientTimeoutError()  # type: ignore[no-untyped-call]
    assert type(translate(timed_out, "w", write=True)) is OutcomeUnknown


async def test_a_call_past_its_deadline_is_unanswered() -> None:
    with pytest.raises(OutcomeUnknown, match=r"within 0\.01 s"):
        async with translated("w", 0.01, write=True):
            await asyncio.sleep(1)
    with pytest.raises(OutcomeUnknown, match=r"within 0\.01 s"):
        async with translated("r", 0.01, write=False):
            await asyncio.sleep(1)


@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [
        ("https://127.0.0.1:8081/", True),
        ("https://localhost:8081/", True),
        ("https://[::1]:8081/", True),
        ("https://acct.documents.azure.com:443/", False),
        ("https://127.0.0.1.attacker.example/", False),
        ("https://localhost.attacker.example/", False),
        ("https://10.0.0.4/", False),
    ],
)
def test_only_a_loopback_account_goes_unverified(endpoint: str, loopback: bool) -> None:
    assert is_loopback(endpoint) is loopback


def test_the_key_is_never_shown() -> None:
    from shared.config import build_config

    settings = Settings(
        {"BUS_COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/", "BUS_COSMOS_KEY": KEY},
        {},
    )
    config = build_config(settings)

    assert config.cosmos.key == KEY
    assert KEY not in repr(config.cosmos)
    assert KEY not in repr(CosmosSettings("https://a/", KEY))


async def test_without_a_key_the_app_signs_in_with_its_identity() -> None:
    from azure.identity.aio import DefaultAzureCredential

    settings = CosmosSettings(endpoint="https://acct.documents.azure.com:443/")
    database = CosmosDatabase.from_settings(settings, StorageTimeouts())

    assert [type(c) for c in database._closing] == [DefaultAzureCredential]
    assert isinstance(database.endpoint_documents("orders"), CosmosDocuments)
    await database.close()  # closes the credential it made with the client


@pytest.mark.cosmos
async def test_content_cannot_take_the_properties_cosmos_keeps(cosmos: CosmosSettings) -> None:
    name = unique_name("e")
    async with cosmos_database(cosmos, [name]) as database:
        documents = database.endpoint_documents(name)
        for taken in ("id", "_etag", "_ts", "_rid", "_self", "_attachments"):
            with pytest.raises(InvalidValue, match="Cosmos DB keeps"):
                await documents.create("p1", {taken: "x"})
        assert await documents.read("p1") is None


@pytest.mark.cosmos
async def test_items_someone_else_put_in_the_container_are_passed_over(
    cosmos: CosmosSettings,
) -> None:
    """Anyone who may write to the container can put anything there: the cleanup's listing
    hears of each such item as damaged and goes on; a partition's read refuses it."""
    name = unique_name("e")
    async with cosmos_database(cosmos, [name]) as database:
        container = database.client.get_database_client(database.name).get_container_client(name)
        foreign: list[dict[str, Any]] = [
            {"id": "a b", "pk": "a b", "rows": {}},
            {"id": "p1", "pk": "other", "rows": {}},
            {"id": "p2", "rows": "not rows"},
            {"id": "p3", "pk": "p3", "rows": {"r": ["not", "a", "row"]}},
        ]
        for item in foreign:
            await container.create_item(item)
        rows = DocumentRows(database.endpoint_documents(name))
        damaged: list[DamagedRow] = []

        removed = await rows.expire_audit(datetime.now(UTC), damaged.append)

        assert removed == 0
        assert len(damaged) >= 3
        with pytest.raises(CorruptRecord, match="'p1'"):
            await rows.read("p1", ["r"])
