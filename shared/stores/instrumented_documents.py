"""Counting and fault injection for a document database (``store="cosmos"`` endpoints), as
``shared.stores.instrumented`` does for the storage account and ``shared.bus.state.instrumented``
for SQL: every read, create, replace, delete and page is one numbered operation
(``cosmos.read``, ``cosmos.create``, ``cosmos.replace``, ``cosmos.delete``, ``cosmos.page``)
of the same ``Instrumentation``, so the bench counts a Cosmos DB endpoint's requests beside the
queue and blob requests of its messages, and a fault plan reaches its document writes. Blob
documents need none of this: they are blobs of the instrumented account, counted as such.
"""

from __future__ import annotations

from typing import Any

from shared.bus.state.stores import DocumentDatabase
from shared.stores.documents import DocumentPage, Documents, StoredDocument
from shared.stores.instrumented import Instrumentation


class InstrumentedDocumentDatabase:
    """A ``DocumentDatabase`` whose endpoints' documents are counted (``InstrumentedDocuments``)."""

    def __init__(self, inner: DocumentDatabase, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.instrumentation = instrumentation

    def endpoint_documents(self, endpoint: str) -> Documents:
        return InstrumentedDocuments(self.inner.endpoint_documents(endpoint), self.instrumentation)

    async def close(self) -> None:
        await self.inner.close()


class InstrumentedDocuments(Documents):
    """One endpoint's documents, each call one numbered operation. The kinds are named here,
    not built from the store's ``kind``: the bench prices each kind it counts
    (``lab/bench/prices.py``), and a name spelled out is one a reader and a test can find."""

    def __init__(self, inner: Documents, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.name = inner.name
        self.kind = inner.kind
        self.max_bytes = inner.max_bytes
        self._i = instrumentation

    def _target(self, key: str) -> str:
        return f"{self.name}/{key}"

    async def read(self, key: str) -> StoredDocument | None:
        return await self._i.run("cosmos.read", self._target(key), lambda: self.inner.read(key))

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return await self._i.run(
            "cosmos.create", self._target(key), lambda: self.inner.create(key, content)
        )

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await self._i.run(
            "cosmos.replace", self._target(key), lambda: self.inner.replace(key, content, etag)
        )

    async def delete(self, key: str, etag: str) -> None:
        await self._i.run("cosmos.delete", self._target(key), lambda: self.inner.delete(key, etag))

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        return await self._i.run(
            "cosmos.page", self.name, lambda: self.inner.page(continuation, page_size)
        )
