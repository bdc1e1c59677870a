"""Blob container over the async Azure Storage Blob SDK."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlsplit

from azure.core import MatchConditions
from azure.core.pipeline import PipelineContext, PipelineRequest
from azure.core.rest import HttpRequest
from azure.storage.blob import BlobProperties as SdkBlobProperties
from azure.storage.blob.aio import ContainerClient

from shared.errors import AlreadyExists, NotFound
from shared.stores.azure.blob_batch import (
    SubRequest,
    SubResponse,
    decode_responses,
    encode_requests,
)
from shared.stores.azure.direct import DirectResponse, send
from shared.stores.azure.errors import bounded, from_status, translated
from shared.stores.azure.sdk_internals import blob_credential_policy, blob_pipeline
from shared.stores.blob import (
    Blob,
    BlobContainer,
    BlobPage,
    BlobProperties,
    check_batch,
    check_range,
)
from shared.stores.names import check_blob_name, check_metadata

_DELETED = 202
_PAST_THE_END = 416
"""A range that starts at or after the blob's end (the blob unchanged: its ETag is checked
first, 412)."""
_GONE_OR_CHANGED = (404, 412)
"""A blob deleted or replaced since it was listed: not ours to delete any more."""


STREAM_CHUNK_BYTES = 1024 * 1024
"""A blob larger than this is sent in slices of this size. Handed over whole, the event loop's
socket transport copies whatever the socket does not take at once into its own buffer: most
of a large token again (measured: 28 MiB more for a 16 MiB token). Sliced, each slice waits
for the previous one to drain, and only one slice is copied at a time. Only a create sends a
body, and a create is never retried: the slices are sent once, as a generator can only be."""


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), STREAM_CHUNK_BYTES):
        yield data[start : start + STREAM_CHUNK_BYTES]


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
        self._credential_policy = blob_credential_policy(client)
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
            content=data if data is None or len(data) <= STREAM_CHUNK_BYTES else _chunks(data),
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

    async def read_range(self, name: str, offset: int, length: int, *, etag: str) -> bytes:
        check_blob_name(name)
        check_range(offset, length)
        response = await self._send(
            "GET",
            name,
            (206, _PAST_THE_END),
            {"x-ms-range": f"bytes={offset}-{offset + length - 1}", "If-Match": etag},
        )
        return b"" if response.status == _PAST_THE_END else response.body

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
        # A conditional write is sent once: a retry of one whose first try landed would
        # answer 412 and hide that our own write succeeded (a lost answer is OutcomeUnknown).
        once: dict[str, Any] = {} if etag is None else {"retry_total": 0}
        async with bounded(self._what(name), self._seconds):
            result = await self._client.get_blob_client(name).upload_blob(
                data, metadata=clean, overwrite=True, **_conditions(etag), **once
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

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        for name, _ in blobs:
            check_blob_name(name)
        check_batch(blobs)
        if not blobs:
            return []
        requests = [await self._signed_delete(name, etag) for name, etag in blobs]
        body = encode_requests(requests)
        query = "&".join(p for p in ("restype=container&comp=batch", self._query) if p)
        request = HttpRequest(
            "POST",
            f"{self._base}?{query}",
            headers={
                "x-ms-version": self._client.api_version,
                "Content-Type": body.content_type,
                "Content-Length": str(len(body.body)),
            },
            content=body.body,
        )
        what = f"container {self.name} (batch delete)"
        response = await send(self._blob_pipeline, request, what, (202,), self._seconds)
        answers = decode_responses(
            response.headers.get("content-type", ""), response.body, len(blobs)
        )
        return [
            self._deleted(name, answer) for (name, _), answer in zip(blobs, answers, strict=True)
        ]

    async def _signed_delete(self, name: str, etag: str) -> SubRequest:
        """A conditional delete of one blob, authorised on its own as the batch requires."""
        request = HttpRequest(
            "DELETE",
            self._url(name),
            headers={
                "x-ms-date": formatdate(usegmt=True),
                "If-Match": etag,
                "Content-Length": "0",
            },
        )
        if self._credential_policy is not None:
            # As the SDK does for its own sub-requests: the HTTPS check belongs to the batch
            # request itself, which the pipeline makes.
            signing = PipelineRequest(request, PipelineContext(None, enforce_https=False))
            signed = self._credential_policy.on_request(signing)
            if inspect.isawaitable(signed):
                await signed  # a token credential fetches or refreshes its token
        url = urlsplit(request.url)
        path = url.path + (f"?{url.query}" if url.query else "")
        return SubRequest("DELETE", path, dict(request.headers))

    def _deleted(self, name: str, answer: SubResponse) -> bool:
        if answer.status == _DELETED:
            return True
        if answer.status in _GONE_OR_CHANGED and answer.error_code != "ContainerNotFound":
            return False
        raise from_status(answer.status, answer.error_code, self._what(name))

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
