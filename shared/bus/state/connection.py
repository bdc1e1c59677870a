"""Connections to PostgreSQL: a libpq URL per database, one asyncpg pool per URL.

``BUS_POSTGRES_URL`` is every PostgreSQL endpoint's database; ``BUS_POSTGRES_URL_<ENDPOINT>``
(the endpoint's name upper-cased, other characters as ``_``) gives one endpoint its own.
With ``BUS_POSTGRES_ENTRA=true`` the password is a Microsoft Entra access token for Azure
Database for PostgreSQL Flexible Server, fetched through azure-identity for every new
connection (tokens last about an hour; pooled connections outlive theirs, which the server
accepts: only the login is checked).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from shared.errors import ConfigurationError

URL_SETTING = "BUS_POSTGRES_URL"
ENTRA_SETTING = "BUS_POSTGRES_ENTRA"
POOL_SETTING = "BUS_POSTGRES_POOL_SIZE"
ENTRA_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"


def endpoint_setting(endpoint: str) -> str:
    return f"{URL_SETTING}_{re.sub(r'[^A-Za-z0-9]', '_', endpoint).upper()}"


@dataclass(frozen=True)
class PostgresSettings:
    url: str | None = None
    """The default database of PostgreSQL endpoints."""
    endpoint_urls: Mapping[str, str] = field(default_factory=dict)
    """Per endpoint overrides, by endpoint name."""
    entra: bool = False
    pool_size: int = 10

    @property
    def configured(self) -> bool:
        return self.url is not None or bool(self.endpoint_urls)

    def url_for(self, endpoint: str) -> str:
        key = endpoint_setting(endpoint)[len(URL_SETTING) + 1 :]
        url = self.endpoint_urls.get(key, self.url)
        if url is None:
            raise ConfigurationError(
                f"endpoint {endpoint} keeps its state in PostgreSQL: set {URL_SETTING} "
                f"(or {endpoint_setting(endpoint)}) to a libpq URL"
            )
        return url


def entra_password(credential: Any | None = None) -> Callable[[], Awaitable[str]]:
    """A password callable that fetches a fresh Entra token for each new connection."""

    async def token() -> str:
        nonlocal credential
        if credential is None:
            from azure.identity.aio import DefaultAzureCredential

            credential = DefaultAzureCredential()
        access = await credential.get_token(ENTRA_SCOPE)
        return str(access.token)

    return token


class Pools:
    """One lazily created pool per URL, shared by the endpoints that use it."""

    def __init__(self, settings: PostgresSettings, credential: Any | None = None) -> None:
        self.settings = settings
        self._password = entra_password(credential) if settings.entra else None
        self._pools: dict[str, asyncpg.Pool] = {}

    async def pool(self, url: str) -> asyncpg.Pool:
        pool = self._pools.get(url)
        if pool is None:
            options: dict[str, Any] = {}
            if self._password is not None:
                options["password"] = self._password
            # min_size 0: creating the pool connects nowhere, so it cannot fail or block.
            pool = await asyncpg.create_pool(
                url, min_size=0, max_size=self.settings.pool_size, **options
            )
            self._pools[url] = pool
        return pool

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()
