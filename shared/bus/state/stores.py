"""Which ``EndpointRows`` an endpoint gets: its table, its rows in a SQL database, or a
document per partition in Cosmos DB or Blob Storage; token mode reads them through
``EndpointState``.

The one place an endpoint's table is opened: always in the app's *state* account (the
account ``BUS_STATE_STORAGE_SETTING`` names, by default the messaging one), never in the
messaging account the apps of a system share (``shared.resources``, the two roles)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from shared.app_settings import MAX_PAYLOAD
from shared.bus.state.base import EndpointState
from shared.bus.state.connection import Pools, PostgresSettings, described
from shared.bus.state.document_rows import DocumentRows
from shared.bus.state.rows import EndpointRows, TableRows
from shared.bus.state.schema import migrate, schema_version
from shared.errors import ConfigurationError, OutcomeUnknown, StateUnreachable
from shared.resources import rows_container
from shared.stores.account import StorageAccount
from shared.stores.blob_documents import BlobDocuments
from shared.stores.delegating import DelegatingTable
from shared.stores.documents import DocumentPage, Documents, StoredDocument

T = TypeVar("T")

if TYPE_CHECKING:
    from shared.bus.app import Endpoint


class SqlDatabase(Protocol):
    """Where ``store="postgres"`` endpoints keep their rows: PostgreSQL or its model."""

    def endpoint_rows(self, endpoint: str) -> EndpointRows: ...

    def endpoint_state(self, endpoint: str) -> EndpointState: ...

    async def close(self) -> None: ...


class DocumentDatabase(Protocol):
    """Where ``store="cosmos"`` endpoints keep their documents: Cosmos DB or its model."""

    def endpoint_documents(self, endpoint: str) -> Documents: ...

    async def close(self) -> None: ...


class PostgresDatabase:
    """PostgreSQL endpoints' rows, in the database their URL setting names."""

    def __init__(self, settings: PostgresSettings, credential: Any | None = None) -> None:
        self.settings = settings
        self.pools = Pools(settings, credential)

    def endpoint_rows(self, endpoint: str) -> EndpointRows:
        from shared.bus.state.postgres_rows import PostgresRows

        return PostgresRows(endpoint, self.settings.url_for(endpoint), self.pools)

    def endpoint_state(self, endpoint: str) -> EndpointState:
        return EndpointState(self.endpoint_rows(endpoint))

    async def close(self) -> None:
        await self.pools.close()

    async def migrate(self, endpoints: Iterable[str]) -> list[str]:
        """Bring each database these endpoints use to the latest schema (idempotent);
        one line per database for the operator."""
        lines = []
        for url in sorted({self.settings.url_for(e) for e in endpoints}):
            pool = await self.pools.pool(url)
            async with pool.acquire() as connection:
                applied = await migrate(connection)
                version = await schema_version(connection)
            where = described(url)  # host, port and database: never credentials
            lines.append(
                f"PostgreSQL {where}: bus schema at version {version}"
                + (f" (applied {applied})" if applied else " (up to date)")
            )
        return lines


class StateTable(DelegatingTable):
    """An endpoint's table in the state account, whose requests that get no answer (a
    timeout, a lost connection, a 5xx: ``OutcomeUnknown`` from the adapter) raise
    ``StateUnreachable``, so that the failure table knows the state store is what is down."""

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await _reached(call())


class StateDocuments(Documents):
    """An endpoint's documents (Cosmos DB or Blob Storage) whose requests that get no answer
    (``OutcomeUnknown`` from the adapter) raise ``StateUnreachable``, as ``StateTable`` does
    for a table: the failure table then knows the state store is what is down."""

    def __init__(self, inner: Documents) -> None:
        self.inner = inner
        self.name, self.kind, self.max_bytes = inner.name, inner.kind, inner.max_bytes

    async def read(self, key: str) -> StoredDocument | None:
        return await _reached(self.inner.read(key))

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return await _reached(self.inner.create(key, content))

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        return await _reached(self.inner.replace(key, content, etag))

    async def delete(self, key: str, etag: str) -> None:
        await _reached(self.inner.delete(key, etag))

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        return await _reached(self.inner.page(continuation, page_size))


async def _reached(call: Awaitable[T]) -> T:
    """``call``'s answer; no answer (``OutcomeUnknown``) is the state store down."""
    try:
        return await call
    except StateUnreachable:
        raise
    except OutcomeUnknown as e:
        raise StateUnreachable(f"the state store did not answer: {e}") from e


def endpoint_rows(
    endpoint: str,
    store: str,
    state: StorageAccount,
    sql: SqlDatabase | None,
    cosmos: DocumentDatabase | None = None,
    *,
    blob_max_bytes: int = MAX_PAYLOAD.default,
) -> EndpointRows:
    """The endpoint's rows in the store it names: its table in the ``state`` account
    (``"table"``), its rows in ``sql`` (``"postgres"``), its documents in ``cosmos``
    (``"cosmos"``) or in its rows container of the ``state`` account (``"blob"``, each
    document at most ``blob_max_bytes``)."""
    if store == "table":
        return TableRows(StateTable(state.table(endpoint)))
    if store == "blob":
        container = state.blob_container(rows_container(endpoint))
        return DocumentRows(StateDocuments(BlobDocuments(container, endpoint, blob_max_bytes)))
    if store == "cosmos":
        if cosmos is None:
            raise ConfigurationError(
                f"endpoint {endpoint} keeps its state in Cosmos DB but the bus has no Cosmos "
                "DB account: set BUS_COSMOS_ENDPOINT"
            )
        return DocumentRows(StateDocuments(cosmos.endpoint_documents(endpoint)))
    if sql is None:
        raise ConfigurationError(
            f"endpoint {endpoint} keeps its state in PostgreSQL but the bus has no database: "
            "set BUS_POSTGRES_URL"
        )
    return sql.endpoint_rows(endpoint)


def endpoint_state(
    endpoint: str,
    store: str,
    state: StorageAccount,
    sql: SqlDatabase | None,
    cosmos: DocumentDatabase | None = None,
    *,
    blob_max_bytes: int = MAX_PAYLOAD.default,
) -> EndpointState:
    """Token mode's typed rows of the endpoint (``endpoint_rows``)."""
    return EndpointState(
        endpoint_rows(endpoint, store, state, sql, cosmos, blob_max_bytes=blob_max_bytes)
    )


def endpoints_rows(
    endpoints: Iterable[Endpoint[Any]],
    state: StorageAccount,
    sql: SqlDatabase | None,
    cosmos: DocumentDatabase | None = None,
) -> dict[str, EndpointRows]:
    """Each endpoint's rows in the store it declares (``endpoint_rows``), by name: what whoever
    composes the cleanup gives it (``shared.cleanup``), whatever the store. The cleanup only
    removes rows, so the size of a blob document is no concern of it."""
    return {e.name: endpoint_rows(e.name, e.store, state, sql, cosmos) for e in endpoints}
