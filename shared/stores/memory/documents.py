"""The in-memory model of a document store (``shared.stores.documents``), with Cosmos DB's
rules: one ETag per write never given out twice, create only if absent, replace and delete
only while unchanged, pages in key order, and the item size limit checked before a write.
Each call does its checking and writing without yielding to the event loop, which makes it
atomic here, as the service is per item."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from shared.errors import AlreadyExists, InvalidValue, PreconditionFailed
from shared.stores.documents import (
    DocumentPage,
    Documents,
    StoredDocument,
    check_document_key,
    parsed_document,
)

COSMOS_MAX_ITEM_BYTES = 2 * 1024 * 1024
"""Cosmos DB's largest item: 2 MB of UTF-8 JSON, its system properties included."""
COSMOS_SYSTEM_BYTES = 512
"""Room kept for the properties Cosmos DB adds to every item (``_rid``, ``_self``, ``_etag``,
``_attachments``, ``_ts``) and the item's ``id``, which count towards its size."""


@dataclass
class MemoryDocumentDatabase:
    """Every endpoint's documents, by endpoint and key, as stored bytes and their ETag."""

    containers: dict[str, dict[str, tuple[bytes, str]]] = field(default_factory=dict)
    max_bytes: int = COSMOS_MAX_ITEM_BYTES - COSMOS_SYSTEM_BYTES
    kind: str = "cosmos"
    _etags: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_etag(self) -> str:
        return f'"{next(self._etags):08x}-0000-0000-0000-000000000000"'

    def endpoint_documents(self, endpoint: str) -> Documents:
        return MemoryDocuments(self, endpoint)

    def copy(self) -> MemoryDocumentDatabase:
        """An independent copy (stored documents are immutable bytes, so they are shared);
        ETags go on from the same number in both."""
        copied = MemoryDocumentDatabase(
            {name: dict(documents) for name, documents in self.containers.items()},
            self.max_bytes,
            self.kind,
        )
        start = next(self._etags)
        self._etags = itertools.count(start)
        copied._etags = itertools.count(start)
        return copied

    async def close(self) -> None:
        """Nothing to release: the documents live as long as the object."""


class MemoryDocuments(Documents):
    """One endpoint's documents in the model."""

    def __init__(self, database: MemoryDocumentDatabase, endpoint: str) -> None:
        self.database = database
        self.name = endpoint
        self.kind = database.kind
        self.max_bytes = database.max_bytes

    @property
    def _stored(self) -> dict[str, tuple[bytes, str]]:
        return self.database.containers.setdefault(self.name, {})

    async def read(self, key: str) -> StoredDocument | None:
        found = self._stored.get(check_document_key(key))
        return None if found is None else parsed_document(key, *found)

    async def create(self, key: str, content: dict[str, Any]) -> str:
        data = self.encoded(key, content)
        if key in self._stored:
            raise AlreadyExists(f"document {key!r} of {self.name} exists")
        etag = self.database.new_etag()
        self._stored[key] = (data, etag)
        return etag

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        data = self.encoded(key, content)
        found = self._stored.get(key)
        if found is None or found[1] != etag:
            raise PreconditionFailed(f"document {key!r} of {self.name} changed or is gone")
        new = self.database.new_etag()
        self._stored[key] = (data, new)
        return new

    async def delete(self, key: str, etag: str) -> None:
        found = self._stored.get(check_document_key(key))
        if found is None or found[1] != etag:
            raise PreconditionFailed(f"document {key!r} of {self.name} changed or is gone")
        del self._stored[key]

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        if page_size < 1:
            raise InvalidValue("page_size must be at least 1")
        keys = sorted(k for k in self._stored if continuation is None or k > continuation)
        documents = [parsed_document(key, *self._stored[key]) for key in keys[:page_size]]
        following = keys[page_size - 1] if len(keys) > page_size else None
        return DocumentPage(documents, following)
