"""Blob container interface: the payload and compare-and-swap store of the protocol."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared.errors import InvalidValue, NotFound, PreconditionFailed

MAX_BATCH_DELETES = 256
"""Blobs one ``delete_unchanged`` call takes: the Blob Batch API's limit per request."""
ANY_ETAG = "*"
"""As the ETag of a ``delete_unchanged`` pair: delete the blob whatever its ETag, if it still
exists (HTTP's ``If-Match: *``). For a blob the caller knows is no longer needed in any
version, such as a consumed incoming token, without a read for its ETag first."""


@dataclass(frozen=True)
class BlobProperties:
    """What a listing or a read tells about a blob without its content."""

    name: str
    etag: str
    size: int
    last_modified: datetime
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlobPage:
    """One page of a listing and the opaque token that continues it (None at the end)."""

    items: list[BlobProperties]
    continuation: str | None


@dataclass(frozen=True)
class Blob:
    """A blob's content with the properties current when it was read."""

    properties: BlobProperties
    data: bytes

    @property
    def etag(self) -> str:
        return self.properties.etag

    @property
    def metadata(self) -> Mapping[str, str]:
        return self.properties.metadata


class BlobContainer(abc.ABC):
    """One blob container.

    Every write returns the blob's new ETag. ETags are opaque: compare them only for equality.
    Metadata names are case-insensitive and come back lower-cased.
    """

    name: str

    @abc.abstractmethod
    async def create_if_missing(self) -> None:
        """Create the container; do nothing if it already exists."""

    @abc.abstractmethod
    async def delete_container(self) -> None:
        """Delete the container and everything in it; do nothing if it is absent."""

    @abc.abstractmethod
    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        """Create a blob only if no blob of that name exists (``If-None-Match: *``).

        Sent as a single request without SDK retries: a retried create could report
        AlreadyExists for a create that in fact succeeded.
        Raises AlreadyExists if the name is taken, NotFound if the container is missing,
        OutcomeUnknown when the request may or may not have been applied.
        """

    @abc.abstractmethod
    async def read(self, name: str) -> Blob:
        """Return content, metadata and ETag in one request. Raises NotFound."""

    @abc.abstractmethod
    async def read_range(self, name: str, offset: int, length: int, *, etag: str) -> bytes:
        """At most ``length`` bytes of the blob from ``offset`` (fewer at its end, none past
        it), only while it still has ``etag`` (``If-Match``): a large blob read in chunks,
        each one of the same version. Raises PreconditionFailed if it changed or is gone."""

    @abc.abstractmethod
    async def get_properties(self, name: str) -> BlobProperties:
        """Return metadata and ETag without the content. Raises NotFound."""

    @abc.abstractmethod
    async def upload(
        self,
        name: str,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
    ) -> str:
        """Replace the blob's content and metadata.

        With ``etag`` the write applies only if the blob still has that ETag (``If-Match``):
        PreconditionFailed if it changed or is gone (Azure answers 412 in both cases). Such a
        write is sent once, without SDK retries, as ``create`` is: OutcomeUnknown when it
        may or may not have landed.
        Without ``etag`` it creates or overwrites unconditionally.
        """

    @abc.abstractmethod
    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        """Replace the blob's metadata (content unchanged), optionally ``If-Match: etag``.

        Raises NotFound if the blob is absent (PreconditionFailed when ``etag`` was given),
        PreconditionFailed if the ETag changed.
        """

    @abc.abstractmethod
    async def delete(self, name: str, *, etag: str | None = None) -> None:
        """Delete the blob, optionally only if it still has ``etag``.

        Raises NotFound if absent (PreconditionFailed when ``etag`` was given), and
        PreconditionFailed if the ETag changed.
        """

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        """Delete each ``(name, etag)`` blob only while it still has that ETag, as one request
        where the service offers a batch (Azure's Blob Batch API); at most
        ``MAX_BATCH_DELETES`` blobs per call.

        Returns, in order, whether each blob was deleted: False when it is gone or changed
        since (each blob's own If-Match decides, independently of the others; ``ANY_ETAG``
        matches any blob that exists). Any other
        failure raises, and then any subset of the blobs may have been deleted. This default
        deletes one blob at a time; backends with a batch override it.
        """
        check_batch(blobs)
        deleted: list[bool] = []
        for name, etag in blobs:
            try:
                await self.delete(name, etag=None if etag == ANY_ETAG else etag)
            except (NotFound, PreconditionFailed):
                deleted.append(False)
            else:
                deleted.append(True)
        return deleted

    @abc.abstractmethod
    def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        """Yield the properties (with metadata) of every blob whose name starts with ``prefix``,
        in name order, fetching page by page."""

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        """One page of ``list(prefix)``: at most ``page_size`` blobs in name order, and a
        continuation to pass back for the next page (None when the listing is complete).

        Continuations are opaque and only valid for the container that returned them. This
        default resumes after the last name returned; backends with server-side paging
        override it.
        """
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        items: list[BlobProperties] = []
        async for properties in self.list(prefix):
            if continuation is not None and properties.name <= continuation:
                continue
            if len(items) == page_size:
                return BlobPage(items, items[-1].name)
            items.append(properties)
        return BlobPage(items, None)


def check_range(offset: int, length: int) -> None:
    """Refuse a range no service reads: before the start, or of no byte."""
    if offset < 0 or length < 1:
        raise InvalidValue(
            f"a range starts at 0 or later and holds a byte at least: {offset}+{length}"
        )


def check_batch(blobs: Sequence[tuple[str, str]]) -> None:
    """Refuse a batch the service would refuse: too many blobs, one blob twice, or an ETag
    that is empty or holds a line break."""
    if len(blobs) > MAX_BATCH_DELETES:
        raise InvalidValue(f"a batch deletes at most {MAX_BATCH_DELETES} blobs, got {len(blobs)}")
    if len({name for name, _ in blobs}) != len(blobs):
        raise InvalidValue("a batch may name each blob only once")
    for name, etag in blobs:
        # An ETag travels as a header: a line break in one could smuggle in a request.
        if not etag or any(c in etag for c in "\r\n\0"):
            raise InvalidValue(f"blob {name!r}: not an ETag: {etag!r}")
