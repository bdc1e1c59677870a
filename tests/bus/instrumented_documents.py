"""Counting and fault injection for a document database (``store="cosmos"`` endpoints), as
``shared.stores.instrumented`` does for the storage account and
``shared.bus.state.instrumented`` for SQL: every read, create, replace, delete and page is one
numbered operation (``cosmos.read``, ``cosmos.create``, ``cosmos.replace``, ``cosmos.delete``,
``cosmos.page``) of the same ``Instrumentation``, so a pipeline test can crash a delivery
between a document write and its answer, or lose the answer of one that landed. Blob
documents need none of this: they are blobs of the instrumented account."""

from __future__ import annotations

from typing import Any

from shared.bus.state.stores import DocumentDatabase
from shared.stores.documents import DocumentPage, Documents, StoredDocument
from shared.stores.instrumented import Instrumentation


class InstrumentedDocumentDatabase:
    def __init__(self, inner: DocumentDatabase, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.instrumentation = instrumentation

    def endpoint_documents(self, endpoint: str) -> Documents:
        return InstrumentedDocuments(self.inner.endpoint_documents(endpoint), self.instrumentation)

    async def close(self) -> None:
        await self.inner.close()


class InstrumentedDocuments(Documents):
    """One endpoint's documents, each call one numbered operation named by the store's kind."""

    def __init__(self, inner: Documents, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.name = inner.name
        self.kind = inner.kind
        self.max_bytes = inner.max_bytes
        self._i = instrumentation

    def _target(self, key: str) -> str:
        return f"{self.name}/{key}"

    async def read(self, key: str) -> StoredDocument | None:
        return await self._i.run(
            f"{self.kind}.read", self._target(key), lambda: self.inner.read(key)
        )

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return await self._i.run(
            f"{self.kind}.create", self._target(key), lambda: self.inner.create(key, content)
        )

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await self._i.run(
            f"{self.kind}.replace",
            self._target(key),
            lambda: self.inner.replace(key, content, etag),
        )

    async def delete(self, key: str, etag: str) -> None:
        await self._i.run(
            f"{self.kind}.delete", self._target(key), lambda: self.inner.delete(key, etag)
        )

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        return await self._i.run(
            f"{self.kind}.page", self.name, lambda: self.inner.page(continuation, page_size)
        )
