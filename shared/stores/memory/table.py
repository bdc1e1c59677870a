"""In-memory table with Azure's uniqueness, ETag and batch-atomicity rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from shared.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    StorageError,
    TransactionFailed,
)
from shared.stores.memory.state import MemoryState
from shared.stores.names import check_key
from shared.stores.table import (
    Delete,
    Entity,
    Insert,
    Page,
    Table,
    TableOperation,
    Update,
    Upsert,
    check_transaction,
    decode_continuation,
    encode_continuation,
    normalise_entity,
    operation_key,
)

_Rows = dict[tuple[str, str], Entity]


class MemoryTable(Table):
    def __init__(self, state: MemoryState, name: str) -> None:
        self._state = state
        self.name = name

    def _rows(self) -> _Rows:
        try:
            rows: _Rows = self._state.tables[self.name]
        except KeyError:
            raise NotFound(f"table {self.name!r} does not exist") from None
        return rows

    async def create_if_missing(self) -> None:
        with self._state.lock:
            self._state.tables.setdefault(self.name, {})

    async def delete_table(self) -> None:
        with self._state.lock:
            self._state.tables.pop(self.name, None)

    async def get(self, partition_key: str, row_key: str) -> Entity:
        check_key("PartitionKey", partition_key)
        check_key("RowKey", row_key)
        with self._state.lock:
            entity = self._rows().get((partition_key, row_key))
        if entity is None:
            raise NotFound(f"entity ({partition_key!r}, {row_key!r}) not in table {self.name}")
        return entity

    async def query(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
        continuation: str | None = None,
    ) -> Page:
        if not 1 <= page_size <= 1000:
            raise ValueError("page_size must be 1-1000")
        start = decode_continuation(continuation) if continuation else None
        wanted = set(row_keys) if row_keys is not None else None
        with self._state.lock:
            rows = self._rows()
            # One partition: sort only its keys, not the whole table.
            keys = sorted(
                rows if partition_key is None else (k for k in rows if k[0] == partition_key)
            )
            matches: list[Entity] = []
            for key in keys:
                pk, rk = key
                if start is not None and key < start:
                    continue
                if partition_key is not None and pk != partition_key:
                    continue
                if row_key_prefix is not None and not rk.startswith(row_key_prefix):
                    continue
                if wanted is not None and rk not in wanted:
                    continue
                if len(matches) == page_size:
                    return Page(matches, encode_continuation(pk, rk))
                matches.append(rows[key])
        return Page(matches, None)

    def _check(self, rows: _Rows, op: TableOperation) -> None:
        """Raise the error Azure would give for ``op`` against ``rows``; change nothing."""
        key = operation_key(op)
        current = rows.get(key)
        if isinstance(op, Insert):
            if current is not None:
                raise AlreadyExists(f"entity {key} already exists in table {self.name}")
        elif isinstance(op, (Update, Delete)):
            if current is None:
                raise NotFound(f"entity {key} not in table {self.name}")
            if op.etag is not None and current.etag != op.etag:
                raise PreconditionFailed(f"entity {key} changed (ETag mismatch)")

    def _write(self, rows: _Rows, op: TableOperation, entity: Entity | None) -> str | None:
        """Apply ``op`` (checked); ``entity`` is its entity as ``normalise_entity`` returned
        it, None for a Delete."""
        key = operation_key(op)
        if entity is None:
            del rows[key]
            return None
        etag = self._state.new_etag()
        rows[key] = Entity(entity.partition_key, entity.row_key, dict(entity.properties), etag)
        return etag

    async def insert(self, entity: Entity) -> str:
        return await self._single(Insert(entity))

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        return await self._single(Update(entity, etag))

    async def upsert(self, entity: Entity) -> str:
        return await self._single(Upsert(entity))

    async def _single(self, op: Insert | Update | Upsert) -> str:
        entity = normalise_entity(op.entity)
        with self._state.lock:
            rows = self._rows()
            self._check(rows, op)
            etag = cast(str, self._write(rows, op, entity))  # None only for a Delete
        return etag

    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        check_key("PartitionKey", partition_key)
        check_key("RowKey", row_key)
        with self._state.lock:
            rows = self._rows()
            if (partition_key, row_key) in rows:
                op = Delete(partition_key, row_key, etag)
                self._check(rows, op)
                self._write(rows, op, None)

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        check_transaction(operations)
        entities = [
            None if isinstance(op, Delete) else normalise_entity(op.entity) for op in operations
        ]
        with self._state.lock:
            rows = self._rows()
            # Every operation names a distinct entity, so checking all of them against the
            # current rows before writing any is exactly Azure's all-or-nothing outcome.
            for index, op in enumerate(operations):
                try:
                    self._check(rows, op)
                except StorageError as e:
                    raise TransactionFailed(index, e) from e
            return [self._write(rows, op, e) for op, e in zip(operations, entities, strict=True)]
