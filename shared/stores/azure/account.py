"""The Azure account: async SDK service clients built from StorageSettings."""

from __future__ import annotations

import os
from typing import Any

from azure.data.tables.aio import TableServiceClient
from azure.storage.blob.aio import BlobServiceClient
from azure.storage.queue.aio import QueueServiceClient

from shared.errors import ConfigurationError
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure.blob import AzureBlobContainer
from shared.stores.azure.queue import AzureQueue
from shared.stores.azure.table import AzureTable
from shared.stores.blob import BlobContainer
from shared.stores.names import check_container_name, check_queue_name, check_table_name
from shared.stores.queue import MessageQueue
from shared.stores.table import Table

# Fail fast rather than hang a function invocation on a dead connection; the pipeline has
# its own retry loop around optimistic-concurrency conflicts.
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
_CLIENT_OPTIONS: dict[str, Any] = {
    "connection_timeout": 10,
    "read_timeout": 30,
    "retry_total": 3,
    # With environment settings on, the HTTP session looks up ~/.netrc and the proxy
    # variables in a thread on every request: a fifth of the client's CPU per message in
    # `make bench`. Keep them only where a proxy is configured.
    "use_env_settings": any(os.environ.get(v) for v in _PROXY_VARIABLES),
}


def _credential(settings: StorageSettings) -> Any:
    if settings.managed_identity:
        from azure.identity.aio import ManagedIdentityCredential

        return ManagedIdentityCredential(client_id=settings.client_id)
    from azure.identity.aio import DefaultAzureCredential

    return DefaultAzureCredential(managed_identity_client_id=settings.client_id)


class AzureStorageAccount(StorageAccount):
    """Azure Storage (or Azurite) through the async SDKs. Use as an async context manager or
    call ``close()``: the clients hold HTTP sessions."""

    def __init__(self, settings: StorageSettings) -> None:
        self.settings = settings
        self._credential: Any = None
        if settings.connection_string is not None:
            conn = settings.connection_string
            self._blobs = BlobServiceClient.from_connection_string(conn, **_CLIENT_OPTIONS)
            self._queues = QueueServiceClient.from_connection_string(conn, **_CLIENT_OPTIONS)
            self._tables = TableServiceClient.from_connection_string(conn, **_CLIENT_OPTIONS)
        else:
            self._credential = _credential(settings)
            if not (
                settings.blob_service_uri
                and settings.queue_service_uri
                and settings.table_service_uri
            ):
                raise ConfigurationError(
                    "storage settings need a connection string or all three service URIs"
                )
            self._blobs = BlobServiceClient(
                settings.blob_service_uri, credential=self._credential, **_CLIENT_OPTIONS
            )
            self._queues = QueueServiceClient(
                settings.queue_service_uri, credential=self._credential, **_CLIENT_OPTIONS
            )
            self._tables = TableServiceClient(
                settings.table_service_uri, credential=self._credential, **_CLIENT_OPTIONS
            )

    def blob_container(self, name: str) -> BlobContainer:
        return AzureBlobContainer(self._blobs.get_container_client(check_container_name(name)))

    def table(self, name: str) -> Table:
        return AzureTable(self._tables.get_table_client(check_table_name(name)))

    def queue(self, name: str) -> MessageQueue:
        return AzureQueue(self._queues.get_queue_client(check_queue_name(name)))

    async def close(self) -> None:
        await self._blobs.close()
        await self._queues.close()
        await self._tables.close()
        if self._credential is not None:
            await self._credential.close()
