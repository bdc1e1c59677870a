"""The in-memory Cosmos DB model (``MemoryDocumentDatabase``) as the simulator sees it: every
document request one numbered operation of the run's ``Instrumentation`` (``doc.read``,
``doc.create``, ``doc.replace``, ``doc.delete``, ``doc.page``), so the scheduler can stop a
process between any two of them and the fault plan reaches each.

A lost answer of a write (``Fault.ERROR_AFTER``: the write landed, its answer did not come back)
is what a store client with retries makes of it: it sends the same conditional request again,
and that copy meets the write's own change (``AlreadyExists`` for a create, ``PreconditionFailed``
for a replace or delete). The caller hears a conflict for a write that landed, which is the case
the partition documents' write ids are for (``shared.bus.state.document_rows``). A timeout the
client gives up on is ``Fault.ERROR_BEFORE`` (not applied) or ``Fault.LATE`` (applied later, at a
point the schedule chooses, or at once: a landed write answered ``OutcomeUnknown``).

Blob documents (``store="blob"``) need none of this: they are blobs of the instrumented account.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from shared.bus.state.stores import DocumentDatabase
from shared.errors import OutcomeUnknown
from shared.stores.documents import DocumentPage, Documents, StoredDocument
from shared.stores.instrumented import Fault, Instrumentation

T = TypeVar("T")

DocumentsWrapper = Callable[[Documents], Documents]
"""How a known-bad variant changes an endpoint's documents (``lab.sim.variants``)."""


class InstrumentedDocumentDatabase:
    """``inner``'s endpoints' documents, each request counted and faulted by
    ``instrumentation``, and changed by ``wrap`` (a variant's) below the instrumentation: the
    variant is the store, the faults are the network's."""

    def __init__(
        self,
        inner: DocumentDatabase,
        instrumentation: Instrumentation,
        wrap: DocumentsWrapper | None = None,
    ) -> None:
        self.inner = inner
        self.instrumentation = instrumentation
        self.wrap = wrap

    def endpoint_documents(self, endpoint: str) -> Documents:
        documents = self.inner.endpoint_documents(endpoint)
        if self.wrap is not None:
            documents = self.wrap(documents)
        return InstrumentedDocuments(documents, self.instrumentation)

    async def close(self) -> None:
        await self.inner.close()


class InstrumentedDocuments(Documents):
    """One endpoint's documents, each call one numbered operation."""

    def __init__(self, inner: Documents, instrumentation: Instrumentation) -> None:
        self.inner = inner
        self.name = inner.name
        self.kind = inner.kind
        self.max_bytes = inner.max_bytes
        self._i = instrumentation

    async def _write(self, kind: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        """A write; after a lost answer, the client's one resend of the same request."""
        index = self._i.count  # the number ``run`` gives this operation
        try:
            return await self._i.run(kind, f"{self.name}/{key}", call)
        except OutcomeUnknown:
            if (index, Fault.ERROR_AFTER) not in ((o.index, f) for o, f in self._i.injected):
                raise
        return await call()  # meets the landed write's own change: a conflict

    async def read(self, key: str) -> StoredDocument | None:
        return await self._i.run("doc.read", f"{self.name}/{key}", lambda: self.inner.read(key))

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return await self._write("doc.create", key, lambda: self.inner.create(key, content))

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await self._write("doc.replace", key, lambda: self.inner.replace(key, content, etag))

    async def delete(self, key: str, etag: str) -> None:
        await self._write("doc.delete", key, lambda: self.inner.delete(key, etag))

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        return await self._i.run(
            "doc.page", self.name, lambda: self.inner.page(continuation, page_size)
        )


# -- known-bad document stores (the variants of ``lab.sim.variants``) ----------------------------


class DelegatingDocuments(Documents):
    """Passes every call to ``inner``; a variant overrides what it changes. Each call does its
    work without yielding to the event loop, so it stays one atomic request of the model."""

    def __init__(self, inner: Documents) -> None:
        self.inner = inner
        self.name = inner.name
        self.kind = inner.kind
        self.max_bytes = inner.max_bytes

    async def read(self, key: str) -> StoredDocument | None:
        return await self.inner.read(key)

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return await self.inner.create(key, content)

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await self.inner.replace(key, content, etag)

    async def delete(self, key: str, etag: str) -> None:
        await self.inner.delete(key, etag)

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        return await self.inner.page(continuation, page_size)


class UnconditionalDocuments(DelegatingDocuments):
    """Every write goes through whatever the document holds now, as a write without
    ``If-Match`` (or ``If-None-Match``) does: the last writer wins."""

    async def create(self, key: str, content: dict[str, Any]) -> str:
        found = await self.inner.read(key)
        if found is None:
            return await self.inner.create(key, content)
        return await self.inner.replace(key, content, found.etag)

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await self.create(key, content)

    async def delete(self, key: str, etag: str) -> None:
        found = await self.inner.read(key)
        if found is not None:
            await self.inner.delete(key, found.etag)


class _AnyVersion(str):
    """A row version equal to every other: whatever version a write expects, it finds it."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


def _rows_rewritten(
    found: StoredDocument, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> StoredDocument:
    if found.content is None:
        return found
    return StoredDocument(found.key, change(found.content), found.etag, found.damage)


def _versions_unchecked(content: dict[str, Any]) -> dict[str, Any]:
    rows = content.get("rows")
    if not isinstance(rows, dict):
        return content
    changed = {
        k: [_AnyVersion(r[0]), *r[1:]] if isinstance(r, list) and r and isinstance(r[0], str) else r
        for k, r in rows.items()
    }
    return {**content, "rows": changed}


class _ReadRewritten(DelegatingDocuments):
    """Every document read or listed is shown changed by ``change``."""

    change: Callable[[dict[str, Any]], dict[str, Any]]

    async def read(self, key: str) -> StoredDocument | None:
        found = await self.inner.read(key)
        return None if found is None else _rows_rewritten(found, type(self).change)

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        page = await self.inner.page(continuation, page_size)
        shown = [_rows_rewritten(d, type(self).change) for d in page.documents]
        return DocumentPage(shown, page.continuation)


class RowVersionsUnchecked(_ReadRewritten):
    """A row's own version inside its partition's document matches whatever a write expects:
    only the document's ETag is checked, so a row changed since its writer read it is written
    over (a lost update, a second commit over the first)."""

    change = staticmethod(_versions_unchecked)
