"""One endpoint's documents (``shared.stores.documents``) as the items of its Cosmos DB
container: the container is named as the endpoint, its partition key path is ``/id``, and an
item is the document's content plus ``"id"``: the document key. Each document is its own
logical partition, so every write is a single-item operation under the item's ETag, which the
service applies atomically (``docs/stores.md``, Cosmos DB)."""

from __future__ import annotations

from typing import Any

from azure.core import MatchConditions
from azure.cosmos.aio import ContainerProxy

from shared.errors import InvalidValue, NotFound
from shared.stores.cosmos.errors import translated
from shared.stores.documents import (
    DocumentPage,
    Documents,
    StoredDocument,
    check_document_key,
)

COSMOS_KIND = "cosmos"
SYSTEM_PROPERTIES = frozenset({"_rid", "_self", "_etag", "_attachments", "_ts", "id"})
"""What Cosmos DB adds to an item (and the id we add): not part of the document."""
PAGE_QUERY = "SELECT TOP @n * FROM c WHERE c.id > @after ORDER BY c.id"
FIRST_PAGE_QUERY = "SELECT TOP @n * FROM c ORDER BY c.id"
NO_RETRY_OF_A_SENT_WRITE: dict[str, Any] = {"retry_read": 0, "retry_write": 0}
"""Per-request options of every write. The SDK retries a request whose connection dropped
after it was sent (``retry_read``) and, when asked, one that timed out (``retry_write``): a
retried create that had landed answers 409 and a retried replace 412, hiding our own write
behind someone else's. So a write is sent once; its lost answer is ``OutcomeUnknown``, and
``DocumentRows`` finds a write that landed by the write id it stores in the document."""


class CosmosDocuments(Documents):
    """The items of one endpoint's container. ``seconds`` bounds each call, the SDK's own
    retries of reads and of throttled requests included."""

    kind = COSMOS_KIND

    def __init__(
        self, container: ContainerProxy, endpoint: str, max_bytes: int, seconds: float
    ) -> None:
        self.container = container
        self.name = endpoint
        self.max_bytes = max_bytes
        self._seconds = seconds

    def _what(self, key: str) -> str:
        return f"cosmos item {key!r} of {self.name}"

    async def read(self, key: str) -> StoredDocument | None:
        check_document_key(key)
        try:
            async with translated(self._what(key), self._seconds, write=False):
                item = await self.container.read_item(key, partition_key=key)
        except NotFound:
            return None
        return _stored(key, item)

    async def create(self, key: str, content: dict[str, Any]) -> str:
        self.encoded(key, content)
        async with translated(self._what(key), self._seconds, write=True):
            item = await self.container.create_item(_item(key, content), **NO_RETRY_OF_A_SENT_WRITE)
        return _etag(item)

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        self.encoded(key, content)
        async with translated(self._what(key), self._seconds, write=True):
            item = await self.container.replace_item(
                key,
                _item(key, content),
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
                **NO_RETRY_OF_A_SENT_WRITE,
            )
        return _etag(item)

    async def delete(self, key: str, etag: str) -> None:
        check_document_key(key)
        async with translated(self._what(key), self._seconds, write=True):
            await self.container.delete_item(
                key,
                partition_key=key,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
                **NO_RETRY_OF_A_SENT_WRITE,
            )

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        """Our own continuation, the last key of the page, rather than the service's tokens:
        an ORDER BY query's token across partitions is bound to the query and the service's
        partition layout and may outgrow a header, while "the keys after this one" holds
        across restarts, other processes and every document store alike."""
        if page_size < 1:
            raise InvalidValue("page_size must be at least 1")
        parameters: list[dict[str, Any]] = [{"name": "@n", "value": page_size + 1}]
        if continuation is not None:
            parameters.append({"name": "@after", "value": continuation})
        query = FIRST_PAGE_QUERY if continuation is None else PAGE_QUERY
        async with translated(f"cosmos container {self.name}", self._seconds, write=False):
            items = [
                item async for item in self.container.query_items(query, parameters=parameters)
            ]
        documents = [_stored(str(item.get("id")), item) for item in items[:page_size]]
        following = documents[-1].key if len(items) > page_size else None
        return DocumentPage(documents, following)


def _item(key: str, content: dict[str, Any]) -> dict[str, Any]:
    if "id" in content or SYSTEM_PROPERTIES & content.keys():
        raise InvalidValue(f"document {key!r} uses a property Cosmos DB keeps for itself")
    return {**content, "id": key}


def _etag(item: dict[str, Any]) -> str:
    return str(item["_etag"])


def _stored(key: str, item: dict[str, Any]) -> StoredDocument:
    """The document an item holds: its properties but the system's and the id."""
    content = {k: v for k, v in item.items() if k not in SYSTEM_PROPERTIES}
    return StoredDocument(key, content, _etag(item))
