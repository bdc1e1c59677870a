"""In-memory blob container with Azure's conditional-request rules."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from shared.clock import to_datetime
from shared.errors import AlreadyExists, NotFound, PreconditionFailed
from shared.stores.blob import (
    ANY_ETAG,
    Blob,
    BlobContainer,
    BlobPage,
    BlobProperties,
    check_batch,
    check_range,
)
from shared.stores.memory.state import MemoryState
from shared.stores.names import check_blob_name, check_metadata


@dataclass(frozen=True)
class _Stored:
    data: bytes
    metadata: dict[str, str]
    etag: str
    modified: float


class MemoryBlobContainer(BlobContainer):
    def __init__(self, state: MemoryState, name: str) -> None:
        self._state = state
        self.name = name

    def _blobs(self) -> dict[str, _Stored]:
        try:
            blobs: dict[str, _Stored] = self._state.containers[self.name]
        except KeyError:
            raise NotFound(f"container {self.name!r} does not exist") from None
        return blobs

    def _existing(self, name: str, etag: str | None) -> _Stored:
        stored = self._blobs().get(name)
        if stored is None and etag is not None:
            # Azure (and Azurite) answer a conditional request on a missing blob with 412.
            raise PreconditionFailed(f"blob {self.name}/{name} does not exist (ETag condition)")
        if stored is None:
            raise NotFound(f"blob {self.name}/{name} does not exist")
        if etag is not None and stored.etag != etag:
            raise PreconditionFailed(f"blob {self.name}/{name} changed (ETag mismatch)")
        return stored

    def _names(self) -> list[str]:
        """Every blob name of the container in order, kept alongside the blobs so that a
        listing costs its result, not a sort of the whole container."""
        names = self._state.blob_names.get(self.name)
        if names is None:
            names = self._state.blob_names[self.name] = sorted(self._blobs())
        return names

    def _put(self, name: str, data: bytes, metadata: dict[str, str]) -> str:
        etag = self._state.new_etag()
        blobs = self._blobs()
        if name not in blobs:
            bisect.insort(self._names(), name)
        blobs[name] = _Stored(bytes(data), metadata, etag, self._state.clock())
        return etag

    def _remove(self, name: str) -> None:
        del self._blobs()[name]
        names = self._names()
        del names[bisect.bisect_left(names, name)]

    @staticmethod
    def _properties(name: str, stored: _Stored) -> BlobProperties:
        return BlobProperties(
            name=name,
            etag=stored.etag,
            size=len(stored.data),
            last_modified=to_datetime(stored.modified),
            metadata=dict(stored.metadata),
        )

    async def create_if_missing(self) -> None:
        with self._state.lock:
            self._state.containers.setdefault(self.name, {})

    async def delete_container(self) -> None:
        with self._state.lock:
            self._state.containers.pop(self.name, None)
            self._state.blob_names.pop(self.name, None)

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata or {})
        with self._state.lock:
            if name in self._blobs():
                raise AlreadyExists(f"blob {self.name}/{name} already exists")
            return self._put(name, data, clean)

    async def read(self, name: str) -> Blob:
        check_blob_name(name)
        with self._state.lock:
            stored = self._existing(name, None)
            return Blob(self._properties(name, stored), stored.data)

    async def read_range(self, name: str, offset: int, length: int, *, etag: str) -> bytes:
        check_blob_name(name)
        check_range(offset, length)
        with self._state.lock:
            return self._existing(name, etag).data[offset : offset + length]

    async def get_properties(self, name: str) -> BlobProperties:
        return (await self.read(name)).properties

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
        with self._state.lock:
            if etag is not None:
                self._existing(name, etag)
            return self._put(name, data, clean)

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        check_blob_name(name)
        clean = check_metadata(metadata)
        with self._state.lock:
            stored = self._existing(name, etag)
            return self._put(name, stored.data, clean)

    async def delete(self, name: str, *, etag: str | None = None) -> None:
        check_blob_name(name)
        with self._state.lock:
            self._existing(name, etag)
            self._remove(name)

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        for name, _ in blobs:
            check_blob_name(name)
        check_batch(blobs)
        deleted: list[bool] = []
        with self._state.lock:
            for name, etag in blobs:
                stored = self._blobs().get(name)
                if stored is None or etag not in (stored.etag, ANY_ETAG):
                    deleted.append(False)
                    continue
                self._remove(name)
                deleted.append(True)
        return deleted

    def _listed(self, prefix: str, after: str | None, limit: int | None) -> list[BlobProperties]:
        with self._state.lock:
            blobs, names = self._blobs(), self._names()
            start = bisect.bisect_left(names, prefix)
            if after is not None and after >= prefix:
                start = bisect.bisect_right(names, after)
            listed: list[BlobProperties] = []
            for index in range(start, len(names)):
                name = names[index]
                if not name.startswith(prefix) or len(listed) == limit:
                    break
                listed.append(self._properties(name, blobs[name]))
            return listed

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        for properties in self._listed(prefix, None, None):
            yield properties

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        items = self._listed(prefix, continuation, page_size + 1)
        if len(items) > page_size:
            return BlobPage(items[:page_size], items[page_size - 1].name)
        return BlobPage(items, None)
