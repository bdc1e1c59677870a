"""Cosmos DB databases on the session's local server (fixture ``cosmos``) for the tests: a
client of the local account, optionally over a transport of the test's (a fault wrapper),
and the database with the given endpoints' containers provisioned, removed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from azure.cosmos.aio import CosmosClient

from shared.settings import StorageTimeouts
from shared.stores.cosmos.database import MAX_DOCUMENT_BYTES, CosmosDatabase
from shared.stores.cosmos.settings import CosmosSettings
from tests.conftest import unique_name


def local_client(settings: CosmosSettings, **options: Any) -> CosmosClient:
    """A client of the local server (its certificate is self-signed), with SDK ``options``."""
    assert settings.endpoint is not None  # the fixture sets both
    assert settings.key is not None
    return CosmosClient(
        settings.endpoint, credential=settings.key, connection_verify=False, **options
    )


@asynccontextmanager
async def cosmos_database(
    settings: CosmosSettings,
    endpoints: Iterable[str],
    *,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    timeouts: StorageTimeouts | None = None,
    **options: Any,
) -> AsyncIterator[CosmosDatabase]:
    """A database of its own on the local server, the endpoints' containers provisioned."""
    client = local_client(settings, **options)
    database = CosmosDatabase(client, unique_name("db"), timeouts, max_bytes=max_bytes)
    try:
        await database.provision(endpoints)
        yield database
    finally:
        await client.delete_database(database.name)
        await database.close()
