"""Shared fixtures: the Azurite emulator (once per session) and the backend parametrisation
that runs every contract test on both the in-memory and the Azure implementation."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from shared.clock import ManualClock
from shared.errors import ConfigurationError
from shared.local.azurite import Azurite, AzuriteEndpoints
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


@dataclass
class Backend:
    """A storage account plus a way to let time pass that suits it."""

    name: str
    account: StorageAccount
    clock: ManualClock | None = None

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
