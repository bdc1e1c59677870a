"""Which ``EndpointState`` an endpoint gets: its table, or its rows in a SQL database."""

from __future__ import annotations

from typing import Any, Protocol

from shared.bus.state.base import EndpointState
from shared.bus.state.connection import Pools, PostgresSettings
from shared.bus.state.table import TableEndpointState
from shared.errors import ConfigurationError
from shared.stores.account import StorageAccount


class SqlDatabase(Protocol):
    """Where ``store="postgres"`` endpoints keep their rows: PostgreSQL or its model."""

    def endpoint_state(self, endpoint: str) -> EndpointState: ...

    async def close(self) -> None: ...


class PostgresDatabase:
    """PostgreSQL endpoints' rows, in the database their URL setting names."""

    def __init__(self, settings: PostgresSettings, credential: Any | None = None) -> None:
        self.settings = settings
        self.pools = Pools(settings, credential)

    def endpoint_state(self, endpoint: str) -> EndpointState:
        from shared.bus.state.postgres import PostgresEndpointState

        return PostgresEndpointState(endpoint, self.settings.url_for(endpoint), self.pools)

    async def close(self) -> None:
        await self.pools.close()


def endpoint_state(
    endpoint: str, store: str, account: StorageAccount, sql: SqlDatabase | None
) -> EndpointState:
    if store == "table":
        return TableEndpointState(account.table(endpoint))
    if sql is None:
        raise ConfigurationError(
            f"endpoint {endpoint} keeps its state in PostgreSQL but the bus has no database: "
            "set BUS_POSTGRES_URL"
        )
    return sql.endpoint_state(endpoint)
