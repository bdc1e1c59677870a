"""The Azure account: async SDK service clients built from StorageSettings."""

from __future__ import annotations

import os
from typing import Any

from azure.data.tables.aio import TableServiceClient
from azure.storage.blob.aio import BlobServiceClient
from azure.storage.blob.aio import ExponentialRetry as BlobRetry
from azure.storage.queue.aio import QueueServiceClient

from shared.errors import ConfigurationError
from shared.settings import StorageSettings, StorageTimeouts
from shared.stores.account import StorageAccount
from shared.stores.azure.blob import AzureBlobContainer
from shared.stores.azure.queue import AzureQueue
from shared.stores.azure.sdk_internals import queue_retry_policy
from shared.stores.azure.table import AzureTable
from shared.stores.blob import BlobContainer
from shared.stores.names import check_container_name, check_queue_name, check_table_name
from shared.stores.queue import MessageQueue
from shared.stores.table import Table

_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
RETRIES = 3
"""Attempts after the first, within the call's deadline (StorageTimeouts.call)."""


def client_options(timeouts: StorageTimeouts) -> dict[str, Any]:
    """Options every service client gets: a silent account must end a call within the
    timeouts (see StorageTimeouts), never hang a request or a queue worker on it."""
    return {
        "connection_timeout": timeouts.connect,
        "read_timeout": timeouts.read,
        "retry_total": RETRIES,
        # With environment settings on, the HTTP session looks up ~/.netrc and the proxy
        # variables in a thread on every request: a fifth of the client's CPU per message in
        # `make bench`. Keep them only where a proxy is configured.
        "use_env_settings": any(os.environ.get(v) for v in _PROXY_VARIABLES),
    }


def _storage_retry(policy: type[Any]) -> Any:
    # The blob and queue SDKs wait 15 s before their first retry by default, longer than a
    # call may take: retry after 1, 3 and 5 s (plus jitter) so retries fit in the deadline.
    return policy(initial_backoff=1, increment_base=2, retry_total=RETRIES, random_jitter_range=1)


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
        self._call_seconds = settings.timeouts.call
        options = client_options(settings.timeouts)
        blob_options = {**options, "retry_policy": _storage_retry(BlobRetry)}
        queue_options = {**options, "retry_policy": _storage_retry(queue_retry_policy())}
        if settings.connection_string is not None:
            conn = settings.connection_string
            self._blobs = BlobServiceClient.from_connection_string(conn, **blob_options)
            self._queues = QueueServiceClient.from_connection_string(conn, **queue_options)
            self._tables = TableServiceClient.from_connection_string(conn, **options)
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
                settings.blob_service_uri, credential=self._credential, **blob_options
            )
            self._queues = QueueServiceClient(
                settings.queue_service_uri, credential=self._credential, **queue_options
            )
            self._tables = TableServiceClient(
                settings.table_service_uri, credential=self._credential, **options
            )

    def blob_container(self, name: str) -> BlobContainer:
        client = self._blobs.get_container_client(check_container_name(name))
        return AzureBlobContainer(client, self._call_seconds)

    def table(self, name: str) -> Table:
        return AzureTable(self._tables.get_table_client(check_table_name(name)), self._call_seconds)

    def queue(self, name: str) -> MessageQueue:
        return AzureQueue(self._queues.get_queue_client(check_queue_name(name)), self._call_seconds)

    async def close(self) -> None:
        await self._blobs.close()
        await self._queues.close()
        await self._tables.close()
        if self._credential is not None:
            await self._credential.close()
