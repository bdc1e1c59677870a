"""The documents contract (``shared.stores.documents``), run against every document store:
the in-memory model, blobs in memory and on Azurite, and Cosmos DB on its local server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shared.errors import AlreadyExists, InvalidValue, PreconditionFailed, TooLarge
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.blob_documents import BlobDocuments
from shared.stores.documents import Documents, document_key
from shared.stores.memory import MemoryStorageAccount
from shared.stores.memory.documents import MemoryDocumentDatabase
from tests.conftest import unique_name
from tests.cosmos import cosmos_database

SMALL = 4096
"""The document size the stores under test are given, where the test chooses it."""


@pytest.fixture(
    name="documents",
    params=[
        "memory",
        "memory-blob",
        pytest.param("azurite-blob", marks=pytest.mark.azurite),
        pytest.param("cosmos", marks=pytest.mark.cosmos),
    ],
)
async def any_documents(request: pytest.FixtureRequest) -> AsyncIterator[Documents]:
    """A fresh endpoint's documents in the store the parameter names."""
    name = unique_name("e")
    if request.param == "memory":
        yield MemoryDocumentDatabase(max_bytes=SMALL).endpoint_documents(name)
    elif request.param == "memory-blob":
        container = MemoryStorageAccount().blob_container("rows")
        await container.create_if_missing()
        yield BlobDocuments(container, name, SMALL)
    elif request.param == "cosmos":
        settings = request.getfixturevalue("cosmos")
        async with cosmos_database(settings, [name], max_bytes=SMALL) as database:
            yield database.endpoint_documents(name)
    else:
        endpoints = request.getfixturevalue("azurite")
        account = AzureStorageAccount(
            StorageSettings(connection_string=endpoints.connection_string)
        )
        container = account.blob_container(unique_name("rows"))
        await container.create_if_missing()
        yield BlobDocuments(container, name, SMALL)
        await container.delete_container()
        await account.close()


async def test_a_document_is_created_once_and_reads_back(documents: Documents) -> None:
    etag = await documents.create("p1", {"a": [1, "x"]})

    with pytest.raises(AlreadyExists):
        await documents.create("p1", {"a": 2})
    found = await documents.read("p1")

    assert found is not None
    assert (found.key, found.content, found.etag) == ("p1", {"a": [1, "x"]}, etag)
    assert await documents.read("p2") is None


async def test_replace_and_delete_hold_only_while_unchanged(documents: Documents) -> None:
    first = await documents.create("p1", {"n": 1})
    second = await documents.replace("p1", {"n": 2}, first)

    with pytest.raises(PreconditionFailed):
        await documents.replace("p1", {"n": 3}, first)
    with pytest.raises(PreconditionFailed):
        await documents.delete("p1", first)
    await documents.delete("p1", second)

    assert second != first
    assert await documents.read("p1") is None
    with pytest.raises(PreconditionFailed):
        await documents.replace("p1", {"n": 4}, second)  # gone
    with pytest.raises(PreconditionFailed):
        await documents.delete("p1", second)  # gone


async def test_an_etag_is_never_handed_out_twice(documents: Documents) -> None:
    first = await documents.create("p1", {"n": 1})
    await documents.delete("p1", first)
    again = await documents.create("p1", {"n": 1})

    assert again != first
    with pytest.raises(PreconditionFailed):
        await documents.replace("p1", {"n": 2}, first)


async def test_only_one_of_two_concurrent_replaces_wins(documents: Documents) -> None:
    etag = await documents.create("p1", {"n": 0})

    results = await asyncio.gather(
        documents.replace("p1", {"n": 1}, etag),
        documents.replace("p1", {"n": 2}, etag),
        return_exceptions=True,
    )

    assert sorted(type(r).__name__ for r in results) == ["PreconditionFailed", "str"]
    found = await documents.read("p1")
    assert found is not None
    assert found.content in ({"n": 1}, {"n": 2})


async def test_only_one_of_two_concurrent_creates_wins(documents: Documents) -> None:
    results = await asyncio.gather(
        documents.create("p1", {"n": 1}),
        documents.create("p1", {"n": 2}),
        return_exceptions=True,
    )

    assert sorted(type(r).__name__ for r in results) == ["AlreadyExists", "str"]


async def test_a_document_over_the_limit_is_refused_before_it_is_sent(
    documents: Documents,
) -> None:
    etag = await documents.create("p1", {"n": 1})
    big = {"text": "x" * documents.max_bytes}

    with pytest.raises(TooLarge, match="holds"):
        await documents.create("p2", big)
    with pytest.raises(TooLarge):
        await documents.replace("p1", big, etag)

    assert await documents.read("p2") is None
    found = await documents.read("p1")
    assert found is not None
    assert (found.content, found.etag) == ({"n": 1}, etag)


async def test_pages_list_documents_in_key_order(documents: Documents) -> None:
    keys = ["p2", "p10", "p1", "q", "a~20b"]
    for key in keys:
        await documents.create(key, {"k": key})

    seen: list[str] = []
    continuation: str | None = None
    while True:
        page = await documents.page(continuation, 2)
        assert len(page.documents) <= 2
        seen += [d.key for d in page.documents]
        assert all(d.content == {"k": d.key} for d in page.documents)
        continuation = page.continuation
        if continuation is None:
            break

    assert seen == sorted(keys)


async def test_keys_must_be_document_keys(documents: Documents) -> None:
    for bad in ["", "a/b", "a?b", "a#b", "..", "x" * 300, "a\\b", "a b"]:
        with pytest.raises(InvalidValue):
            await documents.create(bad, {})
        with pytest.raises(InvalidValue):
            await documents.read(bad)


async def test_hostile_partition_keys_make_safe_distinct_keys(documents: Documents) -> None:
    hostile = ["", "a/b", "../x", "?#", "~e", "~h", "é", "\U0001f600", "p" * 500, "p" * 501]
    keys = [document_key(p) for p in hostile]
    for key, partition in zip(keys, hostile, strict=True):
        await documents.create(key, {"pk": partition})

    assert len(set(keys)) == len(hostile)
    for key, partition in zip(keys, hostile, strict=True):
        found = await documents.read(key)
        assert found is not None
        assert found.content == {"pk": partition}
