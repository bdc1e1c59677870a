"""Documents (``shared.stores.documents``) as JSON blobs: one blob per document, named by its
key, in the endpoint's own container, written with ``If-None-Match: *`` or ``If-Match``. The
container is the endpoint's rows container in the app's state account (``store="blob"``
endpoints: ``shared.resources.rows_container``), on Azurite locally; any ``BlobContainer``
serves, the in-memory one included."""

from __future__ import annotations

from typing import Any

from shared.errors import AlreadyExists, InvalidValue, NotFound, PreconditionFailed
from shared.stores.blob import BlobContainer
from shared.stores.documents import (
    DocumentPage,
    Documents,
    StoredDocument,
    check_document_key,
    parsed_document,
)

BLOB_KIND = "blob"


class BlobDocuments(Documents):
    """One endpoint's documents: the blobs of ``container``, its own. A document
    holds at most ``max_bytes`` (the bus gives the largest body it sends,
    ``BUS_MAX_PAYLOAD_BYTES``)."""

    kind = BLOB_KIND

    def __init__(self, container: BlobContainer, endpoint: str, max_bytes: int) -> None:
        self.container = container
        self.name = endpoint
        self.max_bytes = max_bytes

    def _blob(self, key: str) -> str:
        return check_document_key(key)

    async def read(self, key: str) -> StoredDocument | None:
        try:
            blob = await self.container.read(self._blob(key))
        except NotFound:
            return None
        return parsed_document(key, blob.data, blob.etag)

    async def create(self, key: str, content: dict[str, Any]) -> str:
        data = self.encoded(key, content)
        try:
            return await self.container.create(self._blob(key), data)
        except AlreadyExists as e:
            raise AlreadyExists(f"document {key!r} of {self.name} exists") from e

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        data = self.encoded(key, content)
        return await self.container.upload(self._blob(key), data, etag=etag)

    async def delete(self, key: str, etag: str) -> None:
        try:
            await self.container.delete(self._blob(key), etag=etag)
        except NotFound as e:
            raise PreconditionFailed(f"document {key!r} of {self.name} is gone") from e

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        if page_size < 1:
            raise InvalidValue("page_size must be at least 1")
        listed = await self.container.list_page(page_size=page_size, continuation=continuation)
        documents: list[StoredDocument] = []
        for properties in listed.items:
            key = properties.name
            try:
                blob = await self.container.read(properties.name)
            except NotFound:
                continue  # deleted since it was listed
            documents.append(parsed_document(key, blob.data, blob.etag))
        return DocumentPage(documents, listed.continuation)
