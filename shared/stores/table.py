"""Table interface: business state, outbox records and audit rows, with ETag concurrency and
all-or-nothing transactions inside one partition."""

from __future__ import annotations

import abc
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from shared.errors import InvalidName, InvalidValue, TooLarge
from shared.stores.names import (
    MAX_CUSTOM_PROPERTIES,
    MAX_ENTITY_BYTES,
    MAX_PROPERTY_BYTES,
    MAX_TRANSACTION_OPERATIONS,
    RESERVED_PROPERTIES,
    check_key,
    utf16_size,
)

TableValue = str | int | float | bool | bytes | datetime

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Entity:
    """A table row. ``etag`` is set on entities read from or written to a table."""

    partition_key: str
    row_key: str
    properties: Mapping[str, TableValue] = field(default_factory=dict)
    etag: str = ""

    def __getitem__(self, name: str) -> TableValue:
        return self.properties[name]

    def get(self, name: str, default: TableValue | None = None) -> TableValue | None:
        return self.properties.get(name, default)


@dataclass(frozen=True)
class Insert:
    """Create the entity; fails with AlreadyExists if its key is taken."""

    entity: Entity


@dataclass(frozen=True)
class Update:
    """Replace an existing entity; with ``etag`` only if it is unchanged (else PreconditionFailed).
    NotFound if absent."""

    entity: Entity
    etag: str | None = None


@dataclass(frozen=True)
class Upsert:
    """Insert or replace unconditionally."""

    entity: Entity


@dataclass(frozen=True)
class Delete:
    """Delete an entity; with ``etag`` only if unchanged. Inside a transaction a missing entity
    fails the transaction with NotFound (outside one, deleting a missing entity is a no-op)."""

    partition_key: str
    row_key: str
    etag: str | None = None


TableOperation = Insert | Update | Upsert | Delete


@dataclass(frozen=True)
class Page:
    """One page of a query and the opaque token that continues it (None at the end)."""

    entities: list[Entity]
    continuation: str | None


def encode_continuation(partition_key: str, row_key: str) -> str:
    """Continuation tokens name the next row to return; same format as the Azure adapter."""
    return json.dumps({"pk": partition_key, "rk": row_key})


def decode_continuation(token: str) -> tuple[str, str]:
    try:
        data = json.loads(token)
        return str(data["pk"]), str(data["rk"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"malformed continuation token {token!r}") from e


def operation_key(op: TableOperation) -> tuple[str, str]:
    if isinstance(op, Delete):
        return op.partition_key, op.row_key
    return op.entity.partition_key, op.entity.row_key


def _value_size(value: TableValue) -> int:
    if isinstance(value, str):
        return utf16_size(value)
    if isinstance(value, bytes):
        return len(value)
    return 8


def normalise_entity(entity: Entity, *, table_sizes: bool = True) -> Entity:
    """Check an entity against Azure's rules and return it with datetimes in UTC.

    Both backends call this before writing so that a value Azure would refuse is refused by the
    in-memory store too, with the same error. The endpoint rows kept in PostgreSQL follow the
    same value rules but not Table Storage's sizes (``table_sizes=False``): a database row
    holds a text of any length.
    """
    check_key("PartitionKey", entity.partition_key)
    check_key("RowKey", entity.row_key)
    if len(entity.properties) > MAX_CUSTOM_PROPERTIES:
        raise TooLarge(
            f"entity has {len(entity.properties)} properties; the limit is {MAX_CUSTOM_PROPERTIES}"
        )
    total = _value_size(entity.partition_key) + _value_size(entity.row_key)
    clean: dict[str, TableValue] = {}
    for name, value in entity.properties.items():
        if name in RESERVED_PROPERTIES or not name.isidentifier() or len(name) > 255:
            raise InvalidName(f"invalid property name {name!r}")
        if isinstance(value, (bool, str, float)):
            pass
        elif isinstance(value, int):
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise InvalidValue(f"property {name!r}: {value} does not fit in 64 bits")
        elif isinstance(value, bytes):
            pass
        elif isinstance(value, datetime):
            if value.tzinfo is None:
                raise InvalidValue(f"property {name!r}: datetimes must carry a time zone")
            value = value.astimezone(UTC)
        else:
            raise InvalidValue(
                f"property {name!r} has unsupported type {type(value).__name__}; "
                "use str, int, float, bool, bytes or datetime"
            )
        size = _value_size(value)
        if table_sizes and size > MAX_PROPERTY_BYTES:
            raise TooLarge(
                f"{_row(entity)}: property {name!r} is {size:,} bytes; Table Storage allows "
                f"{MAX_PROPERTY_BYTES // 1024} KiB per property"
            )
        total += size + len(name) * 2
        clean[name] = value
    if table_sizes and total > MAX_ENTITY_BYTES:
        raise TooLarge(
            f"{_row(entity)} is about {total:,} bytes; Table Storage allows "
            f"{MAX_ENTITY_BYTES // 1024 // 1024} MiB per entity"
        )
    return Entity(entity.partition_key, entity.row_key, clean, entity.etag)


def _row(entity: Entity) -> str:
    """The entity as a refusal names it: its keys, which the caller checked."""
    return f"row {entity.partition_key!r}/{entity.row_key!r}"


def check_transaction(operations: Sequence[TableOperation]) -> str:
    """Validate a batch the way Azure does and return its partition key."""
    if not operations:
        raise InvalidValue("a transaction needs at least one operation")
    if len(operations) > MAX_TRANSACTION_OPERATIONS:
        raise TooLarge(
            f"a transaction holds at most {MAX_TRANSACTION_OPERATIONS} operations, "
            f"got {len(operations)}"
        )
    keys = [operation_key(op) for op in operations]
    partitions = {pk for pk, _ in keys}
    if len(partitions) != 1:
        raise InvalidValue(f"a transaction must stay in one partition, got {sorted(partitions)}")
    if len(set(keys)) != len(keys):
        raise InvalidValue("a transaction may touch each entity only once")
    return keys[0][0]


class Table(abc.ABC):
    """One table. ETags are opaque; every write returns the entity's new ETag."""

    name: str

    @abc.abstractmethod
    async def create_if_missing(self) -> None:
        """Create the table; do nothing if it exists."""

    @abc.abstractmethod
    async def delete_table(self) -> None:
        """Delete the table and its rows; do nothing if it is absent."""

    @abc.abstractmethod
    async def get(self, partition_key: str, row_key: str) -> Entity:
        """Point read. Raises NotFound."""

    @abc.abstractmethod
    async def query(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
        continuation: str | None = None,
    ) -> Page:
        """One page of entities in (PartitionKey, RowKey) order, filtered by partition, by a
        RowKey prefix and/or by a set of RowKeys. Pass the returned ``continuation`` back to
        get the next page; it survives process restarts (it is plain text)."""

    async def query_all(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[Entity]:
        """Every entity the filter matches, fetched page by page."""
        continuation: str | None = None
        while True:
            page = await self.query(
                partition_key=partition_key,
                row_key_prefix=row_key_prefix,
                row_keys=row_keys,
                page_size=page_size,
                continuation=continuation,
            )
            for entity in page.entities:
                yield entity
            continuation = page.continuation
            if continuation is None:
                return

    @abc.abstractmethod
    async def insert(self, entity: Entity) -> str:
        """Create the entity. Raises AlreadyExists if the key is taken."""

    @abc.abstractmethod
    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        """Replace an existing entity (all properties), if ``etag`` is given only while the
        stored ETag equals it. Raises NotFound or PreconditionFailed."""

    @abc.abstractmethod
    async def upsert(self, entity: Entity) -> str:
        """Insert or replace unconditionally."""

    @abc.abstractmethod
    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        """Delete the entity; a missing entity is not an error. With ``etag``, raises
        PreconditionFailed if the stored entity has another ETag."""

    @abc.abstractmethod
    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        """Apply 1-100 operations on distinct entities of one partition, all or none.

        Returns each operation's new ETag (None for deletes). When one operation cannot apply
        nothing is written and TransactionFailed(index, cause) names it.
        """
