"""Blob container over the async Azure Storage Blob SDK."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from azure.core import MatchConditions
from azure.core.rest import HttpRequest
from azure.storage.blob import BlobProperties as SdkBlobProperties
from azure.storage.blob.aio import ContainerClient

from shared.errors import AlreadyExists, NotFound, PreconditionFailed, StorageError
from shared.stores.azure.direct import DirectResponse, send
from shared.stores.azure.errors import bounded, translated
from shared.stores.azure.sdk_internals import blob_pipeline
from shared.stores.blob import Blob, BlobContainer, BlobPage, BlobProperties, check_batch
from shared.stores.names import check_blob_name, check_metadata

log = logging.getLogger(__name__)

_BATCH_REFUSED: set[str] = set()
"""Blob endpoints that answered a Blob Batch request with one 400 for the whole batch.
Azurite before 3.37 does that for the SDK's requests (their multipart boundary contains '=',
Azure/Azurite#2413); deletes there go one blob at a time instead."""
_DELETED, _GONE = 202, (404, 412)
_FALLBACK_DELETES_IN_FLIGHT = 8


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


def _blob_headers(metadata: Mapping[str, str], length: int) -> dict[str, str]:
    return {
        "x-ms-blob-type": "BlockBlob",
        "Content-Type": "application/octet-stream",
        "Content-Length": str(length),
        **{f"x-ms-meta-{k}": v for k, v in metadata.items()},
    }


def _metadata(headers: Mapping[str, str]) -> dict[str, str]:
    return {k[10:]: v for k, v in headers.items() if k.lower().startswith("x-ms-meta-")}


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None


def _conditions(etag: str | None) -> dict[str, Any]:
    # Only pass the keywords when set: an explicit etag=None leaks through some SDK calls
    # down to the HTTP session, which rejects it.
    if etag is None:
        return {}
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified}


class AzureBlobContainer(BlobContainer):
    def __init__(self, client: ContainerClient, call_seconds: float) -> None:
        self._client = client
        self._seconds = call_seconds
        self._blob_pipeline = blob_pipeline(client)
        self.name = client.container_name
        base, _, query = client.url.partition("?")
        self._base = base.rstrip("/")
        self._query = query  # a SAS from the connection string travels in the URL

    def _url(self, name: str, comp: str | None = None) -> str:
        params = [p for p in (f"comp={comp}" if comp else "", self._query) if p]
        url = f"{self._base}/{quote(name, safe='~/')}"
        return url + ("?" + "&".join(params) if params else "")

    async def _send(
        self,
        method: str,
        name: str,
        expected: tuple[int, ...],
        headers: dict[str, str],
        *,
        comp: str | None = None,
        data: bytes | None = None,
        **options: Any,
    ) -> DirectResponse:
        request = HttpRequest(
            method,
            self._url(name, comp),
            headers={"x-ms-version": self._client.api_version, **headers},
            content=data,
        )
        return await send(
            self._blob_pipeline, request, self._what(name), expected, self._seconds, **options
        )

    def _what(self, name: str) -> str:
        return f"blob {self.name}/{name}"

    async def create_if_missing(self) -> None:
        try:
            async with bounded(f"container {self.name}", self._seconds):
                await self._client.create_container()
        except AlreadyExists:
            pass

    async def delete_container(self) -> None:
        try:
            async with bounded(f"container {self.name}", self._seconds):
                await self._client.delete_container()
        except NotFound:
            pass

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata or {})
        # If-None-Match: * makes it a create. No retries: a retried create can answer 409 for
        # a first try that did land, hiding that our own write succeeded.
        response = await self._send(
            "PUT",
            name,
            (201,),
            {**_blob_headers(clean, len(data)), "If-None-Match": "*"},
            data=data,
            retry_total=0,
        )
        return response.headers["etag"]

    async def read(self, name: str) -> Blob:
        check_blob_name(name)
        response = await self._send("GET", name, (200,), {})
        headers = response.headers
        properties = _properties(
            name,
            headers["etag"],
            len(response.body),
            _http_date(headers.get("last-modified")),
            _metadata(headers),
        )
        return Blob(properties, response.body)

    async def get_properties(self, name: str) -> BlobProperties:
        check_blob_name(name)
        async with bounded(self._what(name), self._seconds):
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
        async with bounded(self._what(name), self._seconds):
            result = await self._client.get_blob_client(name).upload_blob(
                data, metadata=clean, overwrite=True, **_conditions(etag)
            )
        return str(result["etag"])

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata)
        headers = {f"x-ms-meta-{k}": v for k, v in clean.items()}
        if etag is not None:
            headers["If-Match"] = etag
        response = await self._send("PUT", name, (200,), headers, comp="metadata")
        return response.headers["etag"]

    async def delete(self, name: str, *, etag: str | None = None) -> None:
        check_blob_name(name)
        await self._send("DELETE", name, (202,), {} if etag is None else {"If-Match": etag})

    @property
    def batches_refused(self) -> bool:
        """The service refused a Blob Batch request: batch deletes go one blob at a time."""
        return self._base.rpartition("/")[0] in _BATCH_REFUSED

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        for name, _ in blobs:
            check_blob_name(name)
        check_batch(blobs)
        if not blobs:
            return []
        endpoint = self._base.rpartition("/")[0]
        if endpoint not in _BATCH_REFUSED:
            statuses = await self._batch_delete(blobs)
            if len(statuses) == len(blobs) and any(s != 400 for s in statuses):
                return [
                    self._batch_outcome(name, s)
                    for (name, _), s in zip(blobs, statuses, strict=True)
                ]
            _BATCH_REFUSED.add(endpoint)
            log.warning("%s refuses Blob Batch requests: deleting one blob at a time", endpoint)
        # A few at a time: a whole batch at once would queue up to 256 requests behind one
        # another on a busy emulator, long enough for the last ones to time out.
        limit = asyncio.Semaphore(_FALLBACK_DELETES_IN_FLIGHT)

        async def delete_one(name: str, etag: str) -> bool:
            async with limit:
                return await self._delete_one(name, etag)

        return list(await asyncio.gather(*(delete_one(n, e) for n, e in blobs)))

    async def _batch_delete(self, blobs: Sequence[tuple[str, str]]) -> list[int]:
        requests = [
            {"name": name, "etag": etag, "match_condition": MatchConditions.IfNotModified}
            for name, etag in blobs
        ]
        async with bounded(f"container {self.name} (batch delete)", self._seconds):
            parts = await self._client.delete_blobs(*requests, raise_on_any_failure=False)
            return [part.status_code async for part in parts]

    def _batch_outcome(self, name: str, status: int) -> bool:
        if status == _DELETED:
            return True
        if status in _GONE:
            return False
        raise StorageError(f"blob {self.name}/{name}: batch delete answered {status}")

    async def _delete_one(self, name: str, etag: str) -> bool:
        try:
            await self.delete(name, etag=etag)
        except (NotFound, PreconditionFailed):
            return False
        return True

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        # No deadline around a whole listing: it spans the caller's work between items and
        # may be long. Each page request is still bounded by the transport's timeouts.
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
        async with bounded(f"container {self.name}", self._seconds):
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
