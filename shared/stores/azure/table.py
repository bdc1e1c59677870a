"""Table over the async Azure Data Tables SDK."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.rest import HttpRequest
from azure.data.tables import EdmType, EntityProperty, UpdateMode
from azure.data.tables.aio import TableClient

from shared.errors import AlreadyExists, OutcomeUnknown, StorageError, TooLarge, TransactionFailed
from shared.stores.azure.batch import (
    INT32_MAX,
    INT32_MIN,
    MalformedBatchResponse,
    PartResponse,
    decode_batch,
    encode_batch,
)
from shared.stores.azure.errors import bounded, from_status
from shared.stores.azure.sdk_internals import table_send_request
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


def to_sdk(entity: Entity) -> dict[str, Any]:
    """Our entity as the SDK's dict; ints beyond 32 bits are typed Int64 explicitly because the
    SDK would otherwise refuse them."""
    clean = normalise_entity(entity)
    result: dict[str, Any] = {"PartitionKey": clean.partition_key, "RowKey": clean.row_key}
    for name, value in clean.properties.items():
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not (INT32_MIN <= value <= INT32_MAX)
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
    def __init__(self, client: TableClient, call_seconds: float) -> None:
        self._client = client
        self._seconds = call_seconds
        self._send_request = table_send_request(client)
        self.name = client.table_name
        account_url = client.url.split("?", 1)[0].rstrip("/")
        self._table_url = f"{account_url}/{self.name}"
        self._batch_url = f"{account_url}/$batch"

    def _what(self, pk: str | None = None, rk: str | None = None) -> str:
        if pk is None:
            return f"table {self.name}"
        return f"entity ({pk!r}, {rk!r}) in table {self.name}"

    async def create_if_missing(self) -> None:
        try:
            async with bounded(self._what(), self._seconds):
                await self._client.create_table()
        except AlreadyExists:
            pass

    async def delete_table(self) -> None:
        async with bounded(self._what(), self._seconds):
            await self._client.delete_table()

    async def get(self, partition_key: str, row_key: str) -> Entity:
        check_key("PartitionKey", partition_key)
        check_key("RowKey", row_key)
        async with bounded(self._what(partition_key, row_key), self._seconds):
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
        async with bounded(self._what(), self._seconds):
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
        async with bounded(self._what(entity.partition_key, entity.row_key), self._seconds):
            result = await self._client.create_entity(sdk_entity)
        return str(result["etag"])

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        sdk_entity = to_sdk(entity)
        conditions = _conditions(etag)
        async with bounded(self._what(entity.partition_key, entity.row_key), self._seconds):
            result = await self._client.update_entity(
                sdk_entity, mode=UpdateMode.REPLACE, **conditions
            )
        return str(result["etag"])

    async def upsert(self, entity: Entity) -> str:
        sdk_entity = to_sdk(entity)
        async with bounded(self._what(entity.partition_key, entity.row_key), self._seconds):
            result = await self._client.upsert_entity(sdk_entity, mode=UpdateMode.REPLACE)
        return str(result["etag"])

    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        check_key("PartitionKey", partition_key)
        check_key("RowKey", row_key)
        async with bounded(self._what(partition_key, row_key), self._seconds):
            # The SDK already treats 404 as success, matching the interface contract.
            await self._client.delete_entity(partition_key, row_key, **_conditions(etag))

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        check_transaction(operations)
        clean = [_normalised(op) for op in operations]
        encoded = encode_batch(self._table_url, clean)
        request = HttpRequest(
            "POST",
            self._batch_url,
            headers={
                "x-ms-version": self._client.api_version,
                "DataServiceVersion": "3.0",
                "MaxDataServiceVersion": "3.0;NetFx",
                "Content-Type": encoded.content_type,
                "Accept": "application/json",
            },
            content=encoded.body,
        )
        what = f"transaction on table {self.name}"
        async with bounded(what, self._seconds):
            # The SDK's own pipeline (authentication, retries, transport): only the body is
            # the project's (see shared.stores.azure.batch for why).
            response = await self._send_request(request, stream=True)
            body = await response.read()
        if response.status_code != 202:
            error = PartResponse(response.status_code, {}, body.decode("utf-8", "replace"))
            raise self._failed(error, len(operations))
        parts = decode_batch(response.headers.get("content-type", ""), body)
        failed = next((p for p in parts if not 200 <= p.status < 300), None)
        if failed is not None:
            raise self._failed(failed, len(operations))
        if len(parts) != len(operations):
            raise MalformedBatchResponse(
                f"{what}: {len(parts)} answers for {len(operations)} operations"
            )
        return [
            None if isinstance(op, Delete) else (part.etag or "")
            for op, part in zip(operations, parts, strict=True)
        ]

    def _failed(self, part: PartResponse, operations: int) -> StorageError | OutcomeUnknown:
        code, _ = part.error()
        index = part.failed_index(operations)
        cause = from_status(
            part.status, code, f"operation {index} of a transaction on table {self.name}"
        )
        if isinstance(cause, (TooLarge, OutcomeUnknown)):
            # Not one operation's fault: the whole request was refused or may have landed.
            return cause
        return TransactionFailed(index, cause)


def _normalised(op: TableOperation) -> TableOperation:
    if isinstance(op, Insert):
        return Insert(normalise_entity(op.entity))
    if isinstance(op, Update):
        return Update(normalise_entity(op.entity), op.etag)
    if isinstance(op, Upsert):
        return Upsert(normalise_entity(op.entity))
    return op
