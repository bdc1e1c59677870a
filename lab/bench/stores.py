"""Where a measured mode's endpoints keep their rows, as the bench reads and cleans them
outside the hosts: their tables, PostgreSQL, blob documents in the bench's Azurite, or Cosmos
DB. One place that knows the stores, so that the residue count and the cleanup pass follow a
new one without a branch of their own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.bus.app import Store
from shared.bus.state.document_rows import DocumentRows
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.rows import EndpointRows, TableRows
from shared.bus.state.stores import DocumentDatabase, SqlDatabase, endpoint_rows
from shared.errors import InvalidValue
from shared.stores.account import StorageAccount
from shared.stores.instrumented import Instrumentation
from shared.stores.instrumented_documents import InstrumentedDocuments

if TYPE_CHECKING:
    from lab.bench.request_units import RequestCharges


class BenchRows:
    """The rows of one round's endpoints in ``store``; ``sql`` and ``cosmos`` are the
    databases of the stores that need one (closed by ``close``)."""

    def __init__(
        self,
        store: Store,
        sql: SqlDatabase | None = None,
        cosmos: DocumentDatabase | None = None,
        charges: RequestCharges | None = None,
    ) -> None:
        """``charges``: what ``cosmos`` reports it charged (a Cosmos DB account's request
        units), read around the cleanup pass; None where the database reports none."""
        if store == "postgres" and sql is None:
            raise InvalidValue("PostgreSQL endpoints need their database")
        if store == "cosmos" and cosmos is None:
            raise InvalidValue("Cosmos DB endpoints need their database")
        self.store = store
        self.sql = sql
        self.cosmos = cosmos
        self.charges = charges

    @property
    def in_tables(self) -> bool:
        return self.store == "table"

    def rows(
        self,
        endpoint: str,
        account: StorageAccount,
        instrumentation: Instrumentation | None = None,
    ) -> EndpointRows:
        """The endpoint's rows; ``account`` holds its table or its blob documents (count it
        by passing an instrumented one); ``instrumentation`` counts the databases' requests."""
        if self.cosmos is not None and self.store == "cosmos":
            documents = self.cosmos.endpoint_documents(endpoint)
            if instrumentation is not None:
                documents = InstrumentedDocuments(documents, instrumentation)
            return DocumentRows(documents)
        if self.sql is not None and self.store == "postgres":
            if instrumentation is None:
                return self.sql.endpoint_rows(endpoint)
            return InstrumentedSql(self.sql, instrumentation).endpoint_rows(endpoint)
        if self.store == "blob":
            return endpoint_rows(endpoint, "blob", account, None)
        return TableRows(account.table(endpoint))

    async def close(self) -> None:
        for database in (self.sql, self.cosmos):
            if database is not None:
                await database.close()
