"""The Cosmos DB account of an app's ``store="cosmos"`` endpoints: one database
(``BUS_COSMOS_DATABASE``) holding a container per endpoint, named as the endpoint, partition
key path ``/id`` (``shared.stores.cosmos.documents``). Signed in with the account key when
``BUS_COSMOS_KEY`` is set (the local server, key auth), else with the app's identity."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient, DatabaseProxy

from shared.errors import ConfigurationError
from shared.settings import StorageTimeouts
from shared.stores.cosmos.documents import CosmosDocuments
from shared.stores.cosmos.errors import translated
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.documents import Documents
from shared.stores.memory.documents import COSMOS_MAX_ITEM_BYTES, COSMOS_SYSTEM_BYTES

PARTITION_KEY_PATH = "/id"
MAX_DOCUMENT_BYTES = COSMOS_MAX_ITEM_BYTES - COSMOS_SYSTEM_BYTES
_LOOPBACK_NAMES = {"localhost"}


def is_loopback(endpoint: str) -> bool:
    """Whether the account is on this machine: the local server and the emulator present a
    self-signed certificate there, and nothing crosses a network, so it is not verified."""
    host = urlsplit(endpoint).hostname or ""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cosmos_client(
    settings: CosmosSettings, timeouts: StorageTimeouts, credential: Any
) -> CosmosClient:
    """A client of the account the settings name, signed in with its key when one is set,
    else with ``credential``."""
    if settings.endpoint is None:
        raise ConfigurationError("no Cosmos DB account: set BUS_COSMOS_ENDPOINT")
    return CosmosClient(
        settings.endpoint,
        credential=settings.key if settings.key is not None else credential,
        connection_verify=not is_loopback(settings.endpoint),
        connection_timeout=timeouts.connect,
        read_timeout=timeouts.read,
    )


class CosmosDatabase:
    """The app's Cosmos DB database: each endpoint's documents in its container."""

    def __init__(
        self,
        client: CosmosClient,
        database: str,
        timeouts: StorageTimeouts | None = None,
        *,
        max_bytes: int = MAX_DOCUMENT_BYTES,
        closing: Iterable[Any] = (),
    ) -> None:
        self.client = client
        self.name = database
        self.timeouts = timeouts or StorageTimeouts()
        self.max_bytes = max_bytes
        self._database: DatabaseProxy = client.get_database_client(database)
        self._closing = list(closing)

    @classmethod
    def from_settings(
        cls, settings: CosmosSettings, timeouts: StorageTimeouts, credential: Any | None = None
    ) -> CosmosDatabase:
        """The database the settings name. Without a key and a ``credential``, the app's
        identity (azure-identity's default chain), closed with the database."""
        owned: list[Any] = []
        if settings.key is None and credential is None:
            from azure.identity.aio import DefaultAzureCredential

            credential = DefaultAzureCredential()
            owned.append(credential)
        client = cosmos_client(settings, timeouts, credential)
        return cls(client, settings.database, timeouts, closing=owned)

    def endpoint_documents(self, endpoint: str) -> Documents:
        container = self._database.get_container_client(endpoint)
        return CosmosDocuments(container, endpoint, self.max_bytes, self.timeouts.call)

    async def provision(self, endpoints: Iterable[str]) -> list[str]:
        """Create the database and each endpoint's container if absent (idempotent); one
        line per resource for the operator. A container that exists with another partition
        key is refused: its items would not be one logical partition each."""
        lines = []
        async with translated(f"cosmos database {self.name}", self.timeouts.ingress, write=True):
            await self.client.create_database_if_not_exists(self.name)
        lines.append(f"Cosmos DB database {self.name}: ready")
        for endpoint in endpoints:
            lines.append(await self._provision_container(endpoint))
        return lines

    async def _provision_container(self, endpoint: str) -> str:
        what = f"cosmos container {self.name}/{endpoint}"
        async with translated(what, self.timeouts.ingress, write=True):
            container = await self._database.create_container_if_not_exists(
                endpoint, PartitionKey(path=PARTITION_KEY_PATH)
            )
            properties = await container.read()
        paths = properties.get("partitionKey", {}).get("paths", [])
        if paths != [PARTITION_KEY_PATH]:
            raise ConfigurationError(
                f"{what} exists with partition key {paths}, not [{PARTITION_KEY_PATH!r}]: "
                "remove it or name the endpoint's store otherwise"
            )
        return f"Cosmos DB container {self.name}/{endpoint} (partition key {PARTITION_KEY_PATH})"

    async def close(self) -> None:
        await self.client.close()
        for resource in self._closing:
            await resource.close()
