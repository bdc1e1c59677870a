"""Blob container over the async Azure Storage Blob SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from azure.core import MatchConditions
from azure.storage.blob import BlobProperties as SdkBlobProperties
from azure.storage.blob.aio import ContainerClient

from shared.errors import AlreadyExists, NotFound
from shared.stores.azure.errors import translated
from shared.stores.blob import Blob, BlobContainer, BlobPage, BlobProperties
from shared.stores.names import check_blob_name, check_metadata


def _properties(
    name: str, etag: str, size: int, modified: datetime | None, metadata: Mapping[str, str] | None
) -> BlobProperties:
    return BlobProperties(
        name=name,
        etag=etag,
        size=size,
        last_modified=modified or datetime.now(UTC),
        metadata={k.lower(): v for k, v in (metadata or {}).items()},
    )


def _conditions(etag: str | None) -> dict[str, Any]:
    # Only pass the keywords when set: an explicit etag=None leaks through some SDK calls
    # down to the HTTP session, which rejects it.
    if etag is None:
        return {}
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified}


class AzureBlobContainer(BlobContainer):
    def __init__(self, client: ContainerClient) -> None:
        self._client = client
        self.name = client.container_name

    def _what(self, name: str) -> str:
        return f"blob {self.name}/{name}"

    async def create_if_missing(self) -> None:
        try:
            with translated(f"container {self.name}"):
                await self._client.create_container()
        except AlreadyExists:
            pass

    async def delete_container(self) -> None:
        try:
            with translated(f"container {self.name}"):
                await self._client.delete_container()
        except NotFound:
            pass

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata or {})
        with translated(self._what(name)):
            # overwrite=False sends If-None-Match: *. No SDK retries: a retried create can
            # answer 409 for a first try that did land, hiding that our own write succeeded.
            result = await self._client.get_blob_client(name).upload_blob(
                data, metadata=clean, overwrite=False, retry_total=0
            )
        return str(result["etag"])

    async def read(self, name: str) -> Blob:
        check_blob_name(name)
        with translated(self._what(name)):
            downloader = await self._client.download_blob(name)
            data = await downloader.readall()
        p = downloader.properties
        return Blob(_properties(name, p.etag, p.size, p.last_modified, p.metadata), data)

    async def get_properties(self, name: str) -> BlobProperties:
        check_blob_name(name)
        with translated(self._what(name)):
            p = await self._client.get_blob_client(name).get_blob_properties()
        return _properties(name, p.etag, p.size, p.last_modified, p.metadata)

    async def upload(
        self,
        name: str,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata or {})
        with translated(self._what(name)):
            result = await self._client.get_blob_client(name).upload_blob(
                data, metadata=clean, overwrite=True, **_conditions(etag)
            )
        return str(result["etag"])

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata)
        with translated(self._what(name)):
            result = await self._client.get_blob_client(name).set_blob_metadata(
                clean, **_conditions(etag)
            )
        return str(result["etag"])

    async def delete(self, name: str, *, etag: str | None = None) -> None:
        check_blob_name(name)
        with translated(self._what(name)):
            await self._client.delete_blob(name, **_conditions(etag))

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        with translated(f"container {self.name}"):
            pages = self._client.list_blobs(name_starts_with=prefix or None, include=["metadata"])
            item: SdkBlobProperties
            async for item in pages:
                yield _properties(
                    item.name, item.etag, item.size, item.last_modified, item.metadata
                )

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        # The service's own marker: resuming costs one request, not a re-listing.
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        with translated(f"container {self.name}"):
            # The SDK's page iterator carries the next marker but is typed as a plain iterator.
            pages: Any = self._client.list_blobs(
                name_starts_with=prefix or None, include=["metadata"], results_per_page=page_size
            ).by_page(continuation_token=continuation)
            items: list[BlobProperties] = []
            async for page in pages:
                item: SdkBlobProperties
                async for item in page:
                    items.append(
                        _properties(
                            item.name, item.etag, item.size, item.last_modified, item.metadata
                        )
                    )
                break
            return BlobPage(items, pages.continuation_token or None)
