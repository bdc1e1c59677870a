"""Shared fixtures: the Azurite emulator (once per session) and the backend parametrisation
that runs every contract test on both the in-memory and the Azure implementation."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import asyncpg
import pytest

from shared.bus.state.schema import migrate
from shared.bus.state.stores import SqlDatabase
from shared.clock import ManualClock
from shared.errors import ConfigurationError
from shared.local.azurite import Azurite, AzuriteEndpoints
from shared.local.postgres import PostgresServer
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount

UNDER_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unique_name(prefix: str) -> str:
    """A fresh resource name, so tests sharing one emulator never see each other's data."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="session")
def azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


def started_azurite() -> Iterator[AzuriteEndpoints]:
    """A fresh emulator for as long as the generator runs: under CI a failure to start fails
    the test instead of skipping it."""
    emulator = Azurite()
    try:
        endpoints = emulator.start()
    except ConfigurationError as e:
        if UNDER_CI:
            pytest.fail(f"Azurite is required under CI and could not start: {e}")
        pytest.skip(f"Azurite unavailable (run `make deps`): {e}")
    yield endpoints
    emulator.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A private PostgreSQL server for the session, with the bus schema; its libpq URL.
    Under CI a failure to start fails the test instead of skipping it."""
    server = PostgresServer()
    try:
        url = server.start()
        # Its own thread and loop: the fixture may be set up from inside a running loop.
        with ThreadPoolExecutor(1) as thread:
            thread.submit(asyncio.run, _migrated(url)).result()
    except ConfigurationError as e:
        server.stop()
        if UNDER_CI:
            pytest.fail(f"PostgreSQL is required under CI and could not start: {e}")
        pytest.skip(f"PostgreSQL unavailable (run `make deps`): {e}")
    yield url
    server.stop()


async def _migrated(url: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await migrate(connection)
    finally:
        await connection.close()


@dataclass
class Backend:
    """A storage account plus a way to let time pass that suits it."""

    name: str
    account: StorageAccount
    clock: ManualClock | None = None
    sql: SqlDatabase | None = None
    """Where this backend's ``store="postgres"`` endpoints keep their rows, if it has any."""

    async def elapse(self, seconds: float) -> None:
        """Memory moves its manual clock; Azurite really waits."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)


@pytest.fixture(params=["memory", pytest.param("azurite", marks=pytest.mark.azurite)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = ManualClock()
        yield Backend("memory", MemoryStorageAccount(clock=clock), clock)
        return
    endpoints: AzuriteEndpoints = request.getfixturevalue("azurite")
    account = AzureStorageAccount(StorageSettings(connection_string=endpoints.connection_string))
    try:
        yield Backend("azurite", account)
    finally:
        await account.close()
