"""The in-memory Cosmos DB model (``MemoryDocumentDatabase``) as the simulator sees it: every
document request one numbered operation of the run's ``Instrumentation`` (``cosmos.read``,
``cosmos.create``, ``cosmos.replace``, ``cosmos.delete``, ``cosmos.page``: the counting of
``shared.stores.instrumented_documents``), so the scheduler can stop a process between any two
of them and the fault plan reaches each.

A lost answer of a write (``Fault.ERROR_AFTER``: the write landed, its answer did not come back)
is what a store client that resends makes of it: it sends the same conditional request again,
and that copy meets the write's own change (``AlreadyExists`` for a create,
``PreconditionFailed`` for a replace or delete). The caller hears a conflict for a write that
landed, the case the partition documents' write ids are for (``shared.bus.state.document_rows``).
The project's Cosmos DB adapter sends each write once (``docs/stores.md``), so its lost answer is
``OutcomeUnknown``: that is what a blob document's lost answer is in the simulator (blobs of the
instrumented account), and what ``Fault.LATE`` gives here (a write answered ``OutcomeUnknown``
that lands at once or at a point the schedule chooses). A timeout before a write is applied is
``Fault.ERROR_BEFORE``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from shared.bus.state.stores import DocumentDatabase
from shared.errors import OutcomeUnknown
from shared.stores.documents import DocumentPage, Documents, StoredDocument
from shared.stores.instrumented import Fault, Instrumentation
from shared.stores.instrumented_documents import InstrumentedDocuments

T = TypeVar("T")

DocumentsWrapper = Callable[[Documents], Documents]
"""How a known-bad variant changes an endpoint's documents (``lab.sim.variants``)."""


class SimulatedDocumentDatabase:
    """``inner``'s endpoints' documents, each request counted and faulted by
    ``instrumentation`` (``ResendingDocuments``), and changed by ``wrap`` (a variant's) below
    the instrumentation: the variant is the store, the faults are the network's."""

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
        return ResendingDocuments(documents, self.instrumentation)

    async def close(self) -> None:
        await self.inner.close()


class ResendingDocuments(InstrumentedDocuments):
    """One endpoint's documents, each call one numbered operation; a write whose answer was
    lost is sent once more, as by a client that resends."""

    async def _resent(
        self, write: Callable[[], Awaitable[T]], again: Callable[[], Awaitable[T]]
    ) -> T:
        """``write`` (counted); after the lost answer of that very operation, ``again`` (the
        same request, uncounted), which meets the landed write's own change: a conflict."""
        index = self._i.count  # the number ``run`` gives this operation
        try:
            return await write()
        except OutcomeUnknown:
            if (index, Fault.ERROR_AFTER) not in ((o.index, f) for o, f in self._i.injected):
                raise
        return await again()

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return await self._resent(
            lambda: super(ResendingDocuments, self).create(key, content),
            lambda: self.inner.create(key, content),
        )

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await self._resent(
            lambda: super(ResendingDocuments, self).replace(key, content, etag),
            lambda: self.inner.replace(key, content, etag),
        )

    async def delete(self, key: str, etag: str) -> None:
        await self._resent(
            lambda: super(ResendingDocuments, self).delete(key, etag),
            lambda: self.inner.delete(key, etag),
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
