"""Endpoint rows kept in a document store (``store="cosmos"`` and ``store="blob"``): one JSON
document per partition holding all of that partition's rows, each with its own version,
written only while the document is unchanged (its ETag).

Why one document per partition: every condition the bus puts on a commit (a row inserted
only if absent, a row replaced only while its version is unchanged, the audit row only if
absent, all or nothing) stays inside one partition, and a document replaced under ``If-Match``
makes exactly such a commit in one request, on Cosmos DB and on Blob Storage alike, with no
transaction the store must offer. docs/stores.md says why Cosmos DB's own transactional batch
is not used.

How the rows' conditions hold on top of the document's: a write reads the document, checks
each row's condition against it (``TransactionFailed``, ``AlreadyExists``, ``PreconditionFailed``
and ``NotFound`` exactly as on Table Storage) and writes the whole document back under its
ETag. A document that changed meanwhile (another row of the partition was written) fails only
that ETag: the write reads it again and checks again, so two writers of different rows of one
partition both succeed, as on Table Storage, and two writers of one row never both do.

What a partition may hold is the store's document size (``Documents.max_bytes``). A write whose
own rows would not fit in an empty document is refused as ``TooLarge`` before anything is
sent, which no retry mends (the pipeline parks the message). A write that would fit but for
the rows already there (O(m) records and audit rows the cleanup has not yet retired) raises
``PartitionFull``, a storage error the message is retried on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from shared.bus.records import AUDIT_PREFIX, AuditRecord
from shared.bus.state.damaged import DamagedRow, OnDamaged, pass_over
from shared.bus.state.properties import tagged_properties, untagged_properties
from shared.bus.state.rows import EndpointRows, RowsTransaction, check_writes
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    InvalidValue,
    NotFound,
    PreconditionFailed,
    StorageError,
    TooLarge,
    TransactionFailed,
)
from shared.stores.documents import (
    Documents,
    StoredDocument,
    document_bytes,
    document_key,
)
from shared.stores.table import Entity, Insert, TableOperation, normalise_entity

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 32
"""Times one write reads and writes a partition's document again after another write of the
same partition changed it meanwhile, before it gives up with ``PartitionBusy``."""
DOCUMENTS_PER_PAGE = 100
"""Documents one ``page`` call reads at most: a page of rows may come back short (even empty)
with a continuation, so that one call's work stays bounded however sparse the rows are."""
FORMAT = 1
"""The documents' format, stored in each (``f``)."""


class PartitionFull(StorageError):
    """The partition's document cannot take this write now; it could once the cleanup has
    retired some of its rows. Retried like any storage error."""


class PartitionBusy(StorageError):
    """Other writes of the partition kept changing its document; retried later."""


@dataclass
class _Partition:
    """A partition's document as read: its rows by row key (each ``[version, tagged
    properties]``) and the document's ETag (None: no document yet)."""

    partition_key: str
    key: str
    rows: dict[str, list[Any]]
    etag: str | None
    written_by: str | None = None
    """The id of the write that wrote the document as read (``w``)."""

    def content(self) -> dict[str, Any]:
        return {"f": FORMAT, "pk": self.partition_key, "w": self.written_by, "rows": self.rows}

    def entity(self, row_key: str) -> Entity:
        version, tagged = self.rows[row_key]
        return Entity(self.partition_key, row_key, untagged_properties(tagged), str(version))


def _new_version() -> str:
    return uuid.uuid4().hex


def _landed(partition: _Partition, write_id: str, sent: set[str]) -> bool:
    """Whether the partition's document, read again, shows the last try of write
    ``write_id`` (whose rows had the versions ``sent``) landed."""
    return partition.written_by == write_id or any(
        row[0] in sent for row in partition.rows.values()
    )


def _stored_row(entity: Entity, version: str) -> list[Any]:
    return [version, tagged_properties(entity.properties)]


class DocumentRowsTransaction(RowsTransaction):
    """A document store has no transaction spanning the handler: the commit is one write of
    the partition's document."""

    def __init__(self, rows: DocumentRows) -> None:
        self._rows = rows

    async def commit(
        self, operations: Sequence[TableOperation], audit: AuditRecord
    ) -> list[str | None]:
        writes = check_writes(operations)
        entities = [self._rows.checked(w.entity) for w in writes]
        audit_entity = self._rows.checked(audit.to_entity())
        partition_key = audit_entity.partition_key
        if any(e.partition_key != partition_key for e in entities):
            raise InvalidValue("a commit writes the rows of one partition")
        versions: list[str | None] = [_new_version() for _ in entities]

        def apply(partition: _Partition) -> None:
            for index, (write, entity) in enumerate(zip(writes, entities, strict=True)):
                stored = partition.rows.get(entity.row_key)
                if isinstance(write, Insert) and stored is not None:
                    raise TransactionFailed(index, AlreadyExists(f"row {entity.row_key!r} exists"))
                if not isinstance(write, Insert) and (stored is None or stored[0] != write.etag):
                    raise TransactionFailed(
                        index, PreconditionFailed(f"row {entity.row_key!r} changed or is gone")
                    )
            if audit_entity.row_key in partition.rows:
                raise TransactionFailed(
                    len(writes), AlreadyExists(f"audit row of {audit.message_id} exists")
                )
            for entity, version in zip(entities, versions, strict=True):
                partition.rows[entity.row_key] = _stored_row(entity, str(version))
            partition.rows[audit_entity.row_key] = _stored_row(audit_entity, _new_version())

        own = [*entities, audit_entity]
        await self._rows.write(partition_key, apply, own)
        return versions


class DocumentRows(EndpointRows):
    """An endpoint's rows, a document per partition in ``documents``."""

    def __init__(self, documents: Documents) -> None:
        self.documents = documents
        self.name = documents.name
        self.kind = documents.kind
        self._remembered = _Remembered()

    def where(self, partition_key: str, row_key: str) -> str:
        return f"{self.kind} document of {self.name} {partition_key!r}/{row_key!r}"

    def checked(self, entity: Entity) -> Entity:
        """``entity`` under Table Storage's value rules, not its sizes: a document's limit is
        its own (checked on the whole document)."""
        return normalise_entity(entity, table_sizes=False)

    async def _partition(self, partition_key: str) -> _Partition:
        key = document_key(partition_key)
        found = await self.documents.read(key)
        if found is None:
            absent = _Partition(partition_key, key, {}, None)
            self._remembered.keep(absent, 0)  # a write from it creates: only if still absent
            return absent
        partition = self._parsed(found, partition_key)
        if found.size is not None:
            self._remembered.keep(partition, found.size)
        return partition

    def _parsed(self, found: StoredDocument, partition_key: str | None = None) -> _Partition:
        """A document's rows; CorruptRecord if it is not one this store wrote."""
        content = found.content
        if content is None:
            raise CorruptRecord(
                f"{self.kind} document {found.key!r} of {self.name}: {found.damage}"
            )
        stored_key, rows = content.get("pk"), content.get("rows")
        if not isinstance(stored_key, str) or not isinstance(rows, dict):
            raise CorruptRecord(f"{self.kind} document {found.key!r} of {self.name} has no rows")
        if document_key(stored_key) != found.key or (
            partition_key is not None and stored_key != partition_key
        ):
            raise CorruptRecord(
                f"{self.kind} document {found.key!r} of {self.name} names another partition"
            )
        for row_key, row in rows.items():
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], str)):
                raise CorruptRecord(
                    f"{self.kind} document {found.key!r} of {self.name}: row {row_key!r} "
                    "is not [version, properties]"
                )
        written_by = content.get("w")
        return _Partition(
            stored_key,
            found.key,
            rows,
            found.etag,
            written_by if isinstance(written_by, str) else None,
        )

    async def write(
        self,
        partition_key: str,
        apply: Callable[[_Partition], None],
        own: Sequence[Entity],
    ) -> _Partition:
        """Read the partition's document, let ``apply`` check its conditions and change its
        rows, and write it back while unchanged; again from the read when another write
        changed it meanwhile. ``own`` are the rows this write brings (for its size verdict).
        A try that landed but was answered as a conflict (a store client's resend of it met
        its own change) is known as landed when the document read again names this write or
        still holds a row version the try wrote: versions are never handed out twice, and
        another write of the partition may have come between (then the document names that
        one).

        The first try starts from the document as this object last read or wrote it, when it
        remembers it (``_Remembered``): a message's reads and writes of its partition follow
        each other, and this saves a read before each write. Only a write that lands proves
        such a copy current; any other verdict on it (a condition failed, nothing to change,
        too large) is reached again from a fresh read. Returns the partition as written."""
        write_id = uuid.uuid4().hex
        sent: set[str] = set()
        """The row versions of the last try sent."""
        for attempt in range(MAX_ATTEMPTS):
            remembered = self._remembered.take(partition_key) if attempt == 0 else None
            partition = remembered or await self._partition(partition_key)
            if attempt and _landed(partition, write_id, sent):
                return partition  # the last try landed though its answer said otherwise
            partition.written_by = write_id
            before = dict(partition.rows)
            try:
                apply(partition)
                if partition.rows == before:
                    if remembered is not None:
                        continue  # "nothing to change" must hold on the stored document
                    return partition  # nothing to change: no write
                size = len(document_bytes(partition.content()))
                if own:  # a write that only removes rows is never refused for size
                    self._check_size(partition, own, size)
            except (StorageError, CorruptRecord):
                if remembered is not None:
                    continue  # a verdict on a remembered copy: reach it again from a read
                raise
            sent = {
                str(row[0]) for key, row in partition.rows.items() if before.get(key) is not row
            }
            try:
                await self._store(partition, size)
            except (AlreadyExists, PreconditionFailed):
                continue  # another write of the partition came first: check again
            return partition
        raise PartitionBusy(
            f"{self.kind} document of {self.name} {partition_key!r} changed under "
            f"{MAX_ATTEMPTS} writes in a row"
        )

    async def _store(self, partition: _Partition, size: int) -> None:
        """Write the partition's document under its condition, and remember it as written
        (``size``: its bytes as stored)."""
        if not partition.rows:
            if partition.etag is not None:
                await self.documents.delete(partition.key, partition.etag)
            return
        content = partition.content()
        if partition.etag is None:
            partition.etag = await self.documents.create(partition.key, content)
        else:
            partition.etag = await self.documents.replace(partition.key, content, partition.etag)
        self._remembered.keep(partition, size)

    def _check_size(self, partition: _Partition, own: Sequence[Entity], size: int) -> None:
        """Refuse a document of ``size`` bytes over the store's limit, before it is sent."""
        limit = self.documents.max_bytes
        if size <= limit:
            return
        alone = _Partition(
            partition.partition_key,
            partition.key,
            {e.row_key: _stored_row(e, _new_version()) for e in own},
            None,
        )
        needed = len(document_bytes(alone.content()))
        where = f"partition {partition.partition_key!r} of {self.name}"
        if needed > limit:
            raise TooLarge(
                f"{where}: this write's rows take {needed:,} bytes, and a {self.kind} "
                f"document holds {limit:,} (docs/stores.md, sizes and limits)"
            )
        raise PartitionFull(
            f"{where} holds {len(partition.rows)} rows in {size:,} bytes with this write, over "
            f"the {limit:,} a {self.kind} document holds: retried once the cleanup has "
            "retired some of them (docs/stores.md, sizes and limits)"
        )

    async def read(
        self, partition_key: str, row_keys: Sequence[str], on_damaged: OnDamaged | None = None
    ) -> dict[str, Entity]:
        partition = await self._partition(partition_key)
        found: dict[str, Entity] = {}
        for row_key in row_keys:
            if row_key in partition.rows:
                entity = self._entity(partition, row_key, on_damaged)
                if entity is not None:
                    found[row_key] = entity
        return found

    def _entity(
        self, partition: _Partition, row_key: str, on_damaged: OnDamaged | None
    ) -> Entity | None:
        try:
            return partition.entity(row_key)
        except CorruptRecord as e:
            at = (partition.partition_key, row_key)
            pass_over(on_damaged, DamagedRow(self.where(*at), at, e))
            return None

    async def get(self, partition_key: str, row_key: str) -> Entity:
        partition = await self._partition(partition_key)
        if row_key not in partition.rows:
            raise NotFound(f"{self.where(partition_key, row_key)} is absent")
        return partition.entity(row_key)

    async def insert(self, entity: Entity) -> str:
        row = self.checked(entity)
        version = _new_version()

        def apply(partition: _Partition) -> None:
            if row.row_key in partition.rows:
                raise AlreadyExists(f"{self.where(row.partition_key, row.row_key)} exists")
            partition.rows[row.row_key] = _stored_row(row, version)

        await self.write(row.partition_key, apply, [row])
        return version

    async def update(self, entity: Entity, etag: str) -> str:
        row = self.checked(entity)
        version = _new_version()

        def apply(partition: _Partition) -> None:
            stored = partition.rows.get(row.row_key)
            if stored is None:
                raise NotFound(f"{self.where(row.partition_key, row.row_key)} is gone")
            if stored[0] != etag:
                raise PreconditionFailed(
                    f"{self.where(row.partition_key, row.row_key)} has changed"
                )
            partition.rows[row.row_key] = _stored_row(row, version)

        await self.write(row.partition_key, apply, [row])
        return version

    async def delete(self, partition_key: str, row_key: str, etag: str | None = None) -> None:
        def apply(partition: _Partition) -> None:
            stored = partition.rows.get(row_key)
            if stored is None:
                return
            if etag is not None and stored[0] != etag:
                raise PreconditionFailed(f"{self.where(partition_key, row_key)} has changed")
            del partition.rows[row_key]

        await self.write(partition_key, apply, [])

    async def delete_unchanged(self, entities: Sequence[Entity]) -> list[Entity]:
        """One write of the partition's document removes every row still unchanged."""
        if not entities:
            return []
        partition_key = entities[0].partition_key
        if any(e.partition_key != partition_key for e in entities):
            return await super().delete_unchanged(entities)
        deleted: list[Entity] = []

        def apply(partition: _Partition) -> None:
            deleted.clear()
            for entity in entities:
                stored = partition.rows.get(entity.row_key)
                if stored is not None and stored[0] == entity.etag:
                    del partition.rows[entity.row_key]
                    deleted.append(entity)

        await self.write(partition_key, apply, [])
        return list(deleted)

    async def expire_audit(self, before: datetime, on_damaged: OnDamaged | None = None) -> int:
        """One write per document that holds audit rows processed before ``before``."""
        removed = 0
        continuation: str | None = None
        while True:
            page = await self.documents.page(continuation, DOCUMENTS_PER_PAGE)
            for found in page.documents:
                partition = self._listed(found, on_damaged)
                if partition is None:
                    continue
                expired = [
                    e
                    for row_key in partition.rows
                    if row_key.startswith(AUDIT_PREFIX)
                    and (e := self._entity(partition, row_key, on_damaged)) is not None
                    and isinstance(e.get("processed_at"), datetime)
                    and e["processed_at"] < before  # type: ignore[operator]
                ]
                removed += len(await self.delete_unchanged(expired))
            if page.continuation is None:
                return removed
            continuation = page.continuation

    def _listed(self, found: StoredDocument, on_damaged: OnDamaged | None) -> _Partition | None:
        """A listed document's partition, or None (told to ``on_damaged``) if it cannot be
        read. Remembered like a read one: the cleanup deletes rows of the documents it has
        just listed, and starts those writes from the listed copy."""
        try:
            partition = self._parsed(found)
        except CorruptRecord as e:
            at = (found.key, "")
            pass_over(
                on_damaged, DamagedRow(f"{self.kind} document of {self.name} {found.key!r}", at, e)
            )
            return None
        size = found.size
        if size is None:
            size = len(document_bytes(partition.content()))
        self._remembered.keep(partition, size)
        return partition

    async def page(
        self,
        *,
        row_key_prefix: str | None = None,
        row_key: str | None = None,
        page_size: int,
        continuation: str | None = None,
        on_damaged: OnDamaged | None = None,
        partition_key: str | None = None,
    ) -> tuple[list[Entity], str | None]:
        if page_size < 1:
            raise InvalidValue("page_size must be at least 1")

        def wanted(key: str) -> bool:
            return (row_key_prefix is None or key.startswith(row_key_prefix)) and (
                row_key is None or key == row_key
            )

        cursor = _Cursor.of(continuation)
        if partition_key is not None:
            return self._page_of(
                await self._partition(partition_key), wanted, cursor, page_size, on_damaged
            )
        return await self._page_across(wanted, cursor, page_size, on_damaged)

    def _page_of(
        self,
        partition: _Partition,
        wanted: Callable[[str], bool],
        cursor: _Cursor | None,
        page_size: int,
        on_damaged: OnDamaged | None,
    ) -> tuple[list[Entity], str | None]:
        keys = [
            k for k in sorted(partition.rows) if wanted(k) and (cursor is None or k > cursor.row)
        ]
        page = [e for k in keys[:page_size] if (e := self._entity(partition, k, on_damaged))]
        if len(keys) <= page_size:
            return page, None
        return page, _Cursor(None, partition.key, keys[page_size - 1]).text()

    async def _page_across(
        self,
        wanted: Callable[[str], bool],
        cursor: _Cursor | None,
        page_size: int,
        on_damaged: OnDamaged | None,
    ) -> tuple[list[Entity], str | None]:
        listing = await self.documents.page(
            None if cursor is None else cursor.listing, min(page_size, DOCUMENTS_PER_PAGE)
        )
        rows: list[Entity] = []
        for found in listing.documents:
            if cursor is not None and found.key < cursor.key:
                continue  # before the row the last page ended with
            partition = self._listed(found, on_damaged)
            if partition is None:
                continue
            after = cursor.row if cursor is not None and found.key == cursor.key else None
            for key in sorted(partition.rows):
                if not wanted(key) or (after is not None and key <= after):
                    continue
                if len(rows) == page_size:
                    last = rows[-1]
                    resume = _Cursor(
                        None if cursor is None else cursor.listing,
                        document_key(last.partition_key),
                        last.row_key,
                    )
                    return rows, resume.text()
                entity = self._entity(partition, key, on_damaged)
                if entity is not None:
                    rows.append(entity)
        if listing.continuation is None:
            return rows, None
        return rows, _Cursor(listing.continuation, "", "").text()

    @contextlib.asynccontextmanager
    async def begin(self, connection: Any = None) -> AsyncIterator[RowsTransaction]:
        if connection is not None:
            raise InvalidValue(
                f"{self.name} is in a {self.kind} document store: a session there takes no "
                "connection"
            )
        yield DocumentRowsTransaction(self)


class _Remembered:
    """The documents of the partitions last read or written, small ones only, so that a write
    can start from one without reading it first (``DocumentRows.write``). A copy may be stale
    (another worker wrote since): the store's ETag condition refuses a write from it."""

    ENTRIES = 256
    MAX_BYTES = 64 * 1024
    """A larger document is not remembered: it costs more memory than its read saves."""

    def __init__(self) -> None:
        self._partitions: OrderedDict[str, _Partition] = OrderedDict()

    def keep(self, partition: _Partition, size: int) -> None:
        self._partitions.pop(partition.partition_key, None)
        if size > self.MAX_BYTES:
            return
        self._partitions[partition.partition_key] = _copy(partition)
        while len(self._partitions) > self.ENTRIES:
            self._partitions.popitem(last=False)

    def take(self, partition_key: str) -> _Partition | None:
        """The remembered copy, forgotten: a write that lands remembers what it wrote."""
        return self._partitions.pop(partition_key, None)


def _copy(partition: _Partition) -> _Partition:
    # Writes replace or remove a row's entry, never change it in place: a new dict suffices.
    return replace(partition, rows=dict(partition.rows))


@dataclass(frozen=True)
class _Cursor:
    """Where a page of rows resumes: the listing page of documents to read again (the
    store's own continuation, None: the first), and the document and row key the last page
    ended with (rows up to it are skipped)."""

    listing: str | None
    key: str
    row: str

    def text(self) -> str:
        return json.dumps([self.listing, self.key, self.row])

    @classmethod
    def of(cls, continuation: str | None) -> _Cursor | None:
        if continuation is None:
            return None
        try:
            listing, key, row = json.loads(continuation)
        except (ValueError, TypeError) as e:
            raise InvalidValue(f"malformed continuation {continuation[:80]!r}") from e
        if not (listing is None or isinstance(listing, str)) or not (
            isinstance(key, str) and isinstance(row, str)
        ):
            raise InvalidValue(f"malformed continuation {continuation[:80]!r}")
        return cls(listing, key, row)
