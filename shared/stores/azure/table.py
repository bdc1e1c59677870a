"""Table over the async Azure Data Tables SDK."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError
from azure.data.tables import EdmType, EntityProperty, TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient

from shared.errors import AlreadyExists, StorageError, TransactionFailed
from shared.stores.azure.errors import translate, translated
from shared.stores.names import check_key
from shared.stores.table import (
    Delete,
    Entity,
    Insert,
    Page,
    Table,
    TableOperation,
    TableValue,
    Update,
    Upsert,
    check_transaction,
    decode_continuation,
    encode_continuation,
    normalise_entity,
)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def to_sdk(entity: Entity) -> dict[str, Any]:
    """Our entity as the SDK's dict; ints beyond 32 bits are typed Int64 explicitly because the
    SDK would otherwise refuse them."""
    clean = normalise_entity(entity)
    result: dict[str, Any] = {"PartitionKey": clean.partition_key, "RowKey": clean.row_key}
    for name, value in clean.properties.items():
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not (_INT32_MIN <= value <= _INT32_MAX)
        ):
            result[name] = EntityProperty(value, EdmType.INT64)
        else:
            result[name] = value
    return result


def from_sdk(raw: Mapping[str, Any]) -> Entity:
    properties: dict[str, TableValue] = {}
    for name, value in raw.items():
        if name in ("PartitionKey", "RowKey"):
            continue
        if isinstance(value, EntityProperty):
            value = value.value
        if isinstance(value, datetime):
            # The SDK's datetime subclass carries the service's raw text; a plain datetime is
            # what callers compare against.
            value = datetime.fromtimestamp(value.timestamp(), tz=value.tzinfo)
        properties[name] = value
    metadata = getattr(raw, "metadata", {}) or {}
    return Entity(
        str(raw["PartitionKey"]), str(raw["RowKey"]), properties, str(metadata.get("etag", ""))
    )


def _odata_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _prefix_upper_bound(prefix: str) -> str:
    """The smallest string greater than every string starting with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def build_filter(
    partition_key: str | None, row_key_prefix: str | None, row_keys: Sequence[str] | None
) -> str | None:
    clauses: list[str] = []
    if partition_key is not None:
        clauses.append(f"PartitionKey eq {_odata_string(check_key('PartitionKey', partition_key))}")
    if row_key_prefix:
        clauses.append(f"RowKey ge {_odata_string(row_key_prefix)}")
        clauses.append(f"RowKey lt {_odata_string(_prefix_upper_bound(row_key_prefix))}")
    if row_keys is not None:
        if not row_keys:
            clauses.append("RowKey eq '' and RowKey ne ''")  # matches nothing, like the empty set
        else:
            alternatives = " or ".join(
                f"RowKey eq {_odata_string(check_key('RowKey', rk))}" for rk in row_keys
            )
            clauses.append(f"({alternatives})")
    return " and ".join(clauses) if clauses else None


def _conditions(etag: str | None) -> dict[str, Any]:
    if etag is None:
        return {}
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified}


class AzureTable(Table):
    def __init__(self, client: TableClient) -> None:
        self._client = client
        self.name = client.table_name

    def _what(self, pk: str | None = None, rk: str | None = None) -> str:
        if pk is None:
            return f"table {self.name}"
        return f"entity ({pk!r}, {rk!r}) in table {self.name}"

    async def create_if_missing(self) -> None:
        try:
            with translated(self._what()):
                await self._client.create_table()
        except AlreadyExists:
            pass

    async def delete_table(self) -> None:
        with translated(self._what()):
            await self._client.delete_table()

    async def get(self, partition_key: str, row_key: str) -> Entity:
        check_key("PartitionKey", partition_key)
        check_key("RowKey", row_key)
        with translated(self._what(partition_key, row_key)):
            raw = await self._client.get_entity(partition_key, row_key)
        return from_sdk(raw)

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
        token: Any = None  # the SDK takes its own dict here although it is typed as str
        if continuation:
            pk, rk = decode_continuation(continuation)
            token = {"PartitionKey": pk, "RowKey": rk}
        query_filter = build_filter(partition_key, row_key_prefix, row_keys)
        with translated(self._what()):
            if query_filter is None:
                pager = self._client.list_entities(results_per_page=page_size).by_page(
                    continuation_token=token
                )
            else:
                pager = self._client.query_entities(
                    query_filter, results_per_page=page_size
                ).by_page(continuation_token=token)
            entities: list[Entity] = []
            async for page in pager:
                async for raw in page:
                    entities.append(from_sdk(raw))
                break
        next_token = getattr(pager, "continuation_token", None)
        if not next_token:
            return Page(entities, None)
        return Page(
            entities,
            encode_continuation(next_token["PartitionKey"], next_token.get("RowKey") or ""),
        )

    async def insert(self, entity: Entity) -> str:
        sdk_entity = to_sdk(entity)
        with translated(self._what(entity.partition_key, entity.row_key)):
            result = await self._client.create_entity(sdk_entity)
        return str(result["etag"])

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        sdk_entity = to_sdk(entity)
        conditions = _conditions(etag)
        with translated(self._what(entity.partition_key, entity.row_key)):
            result = await self._client.update_entity(
                sdk_entity, mode=UpdateMode.REPLACE, **conditions
            )
        return str(result["etag"])

    async def upsert(self, entity: Entity) -> str:
        sdk_entity = to_sdk(entity)
        with translated(self._what(entity.partition_key, entity.row_key)):
            result = await self._client.upsert_entity(sdk_entity, mode=UpdateMode.REPLACE)
        return str(result["etag"])

    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        check_key("PartitionKey", partition_key)
        check_key("RowKey", row_key)
        with translated(self._what(partition_key, row_key)):
            # The SDK already treats 404 as success, matching the interface contract.
            await self._client.delete_entity(partition_key, row_key, **_conditions(etag))

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        check_transaction(operations)
        batch: list[Any] = []
        for op in operations:
            if isinstance(op, Insert):
                batch.append(("create", to_sdk(op.entity)))
            elif isinstance(op, Update):
                conditions = _conditions(op.etag)
                batch.append(
                    ("update", to_sdk(op.entity), {"mode": UpdateMode.REPLACE, **conditions})
                )
            elif isinstance(op, Upsert):
                batch.append(("upsert", to_sdk(op.entity), {"mode": UpdateMode.REPLACE}))
            else:
                key = {"PartitionKey": op.partition_key, "RowKey": op.row_key}
                batch.append(("delete", key, _conditions(op.etag)))
        try:
            results = await self._client.submit_transaction(batch)
        except TableTransactionError as e:
            index = e.index if 0 <= e.index < len(operations) else 0
            cause = translate(e, f"operation {index} of a transaction on table {self.name}")
            if not isinstance(cause, StorageError):
                raise cause from e
            raise TransactionFailed(index, cause) from e
        except AzureError as e:
            raise translate(e, f"transaction on table {self.name}") from e
        etags: list[str | None] = []
        for op, result in zip(operations, results, strict=False):
            etags.append(None if isinstance(op, Delete) else str(result.get("etag")))
        return etags
