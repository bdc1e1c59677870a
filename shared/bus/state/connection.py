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
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg

from shared.errors import ConfigurationError
from shared.logsafe import shown

URL_SCHEMES = ("postgresql://", "postgres://")

URL_SETTING = "BUS_POSTGRES_URL"
ENTRA_SETTING = "BUS_POSTGRES_ENTRA"
POOL_SETTING = "BUS_POSTGRES_POOL_SIZE"
ENTRA_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a libpq URL this bus takes, in words that quote nothing of it (it
    may hold a password), or None. Keyword (``host=... password=...``), JDBC and ADO.NET
    forms are refused, as is a URL whose host part does not parse."""
    if not url.startswith(URL_SCHEMES):
        return "it is not a postgresql:// URL (keyword, JDBC and ADO.NET forms are not taken)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        return "its host and port do not parse"
    return None


def described(url: str) -> str:
    """``host:port/database`` of a libpq URL and nothing else: no user, no password (in the
    URL's user part or its ``?password=``), no other parameter. What an operator may see."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(a PostgreSQL URL that does not parse)"
    query = parse_qs(parts.query)
    host = parts.hostname or (query.get("host") or ["localhost"])[0]
    port_text = str(port) if port is not None else (query.get("port") or ["5432"])[0]
    database = unquote(parts.path.lstrip("/")) or (query.get("dbname") or ["(default)"])[0]
    return f"{shown(host, 100)}:{shown(port_text, 10)}/{shown(database, 100)}"


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
