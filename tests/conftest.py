"""Shared fixtures: the Azurite emulator (once per session) and the backend parametrisation
that runs every contract test on both the in-memory and the Azure implementation.

The suite tests the sample app, whatever app the checkout runs: ``BUS_APP`` is pinned to the
sample for the session (the environment wins over ``local.settings.json``), and tests that
need a project folder get one of their own (``sample_project``). The sample charges through
its declared service ``provider``, so the session runs one local payment provider
(``python -m lab.provider``) and pins its address and credential beside ``BUS_APP``: every
worker of the sample, in this process or a host or CLI started from it, reaches a real one.
``CHECKOUT_ENVIRON`` keeps the environment as it was, for the one test that checks the
checkout's own configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from lab.local.azurite import Azurite, AzuriteEndpoints
from lab.local.cosmos import CosmosServer
from lab.local.payments import Provider
from lab.local.postgres import PostgresServer
from lab.provider.process import provider_process
from shared.app_loader import APP_SETTING, DEFAULT_APP
from shared.bus.state.schema import migrate
from shared.bus.state.stores import SqlDatabase
from shared.clock import ManualClock
from shared.errors import ConfigurationError
from shared.resources import RESOURCES_FILE, Resources, resources_json
from shared.runtime import Worker
from shared.sample.app import app as sample_app
from shared.settings import Settings, StorageSettings, resolve_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.memory import MemoryStorageAccount

UNDER_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SAMPLE_APP = DEFAULT_APP
CHECKOUT_ENVIRON = dict(os.environ)
"""The environment before the suite pinned the sample app in it."""
_session = contextlib.ExitStack()
_providers: list[Provider] = []
"""The session's payment provider, once started. One for the whole session, not one per test:
the product adds the performer once per app object (``shared.effects.wiring``), so the first
worker of the sample in this process fixes the address that every later one calls."""


def pytest_configure(config: pytest.Config) -> None:
    """Pin the sample app and its payment provider before any test module is imported
    (``function_app.py`` loads its app at import, and a worker of the sample needs its
    provider's address). Subprocesses inherit both; those that test ``BUS_APP`` set their own."""
    pinned = {APP_SETTING: SAMPLE_APP, **started_sample_provider().app_settings()}
    _session.callback(restore_environ, list(pinned))
    os.environ.update(pinned)
    # Tables the tests compare are as wide as a script reading `bus` gets them; a width
    # the runner sets (pytest-xdist's workers get COLUMNS=80) is not the user's terminal.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests.spark import stop_spark

    stop_spark()
    _session.close()


def restore_environ(names: list[str]) -> None:
    for name in names:
        if name in CHECKOUT_ENVIRON:
            os.environ[name] = CHECKOUT_ENVIRON[name]
        else:
            os.environ.pop(name, None)


def started_sample_provider() -> Provider:
    """The session's payment provider, without faults, its books in a folder of its own
    removed at the end (its ledger is shared: a test reads the entries of its own orders)."""
    workdir = Path(tempfile.mkdtemp(prefix="sample-provider-"))
    _session.callback(shutil.rmtree, workdir, ignore_errors=True)
    credential = secrets.token_urlsafe(24)
    url = _session.enter_context(provider_process(workdir, credential=credential))
    _providers.append(Provider(url, credential))
    return _providers[0]


def sample_settings(**values: str) -> Settings:
    """Settings of the sample app from ``values`` only (no environment, no settings file),
    its service ``provider`` at the session's payment provider."""
    return resolve_settings(
        environ={APP_SETTING: SAMPLE_APP, **sample_provider_settings(), **values}, local_file=None
    )


def sample_provider_settings() -> dict[str, str]:
    """The app settings that point the sample's service ``provider`` at the session's."""
    return _providers[0].app_settings()


def sample_resources() -> Resources:
    """The sample's resources as ``bus resources`` prints them: a worker's, with the performer
    endpoint the runtime adds for its declared service (``sample_app.endpoints`` holds it only
    once some worker of the sample was built in this process)."""
    return Worker(sample_app, sample_settings()).resources


@pytest.fixture(scope="session")
def sample_provider() -> Provider:
    """The session's payment provider, the one every worker of the sample calls."""
    return _providers[0]


@pytest.fixture
def sample_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder of the sample app's, owned by the test and made the current folder:
    its ``infra/resources.json`` generated from the sample app (``resources_for``), and no
    ``local.settings.json`` (a test writes one when it wants one)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(APP_SETTING, SAMPLE_APP)
    resources = tmp_path / RESOURCES_FILE
    resources.parent.mkdir(parents=True, exist_ok=True)
    resources.write_text(resources_json(sample_resources()))
    return tmp_path


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
def cosmos() -> Iterator[CosmosSettings]:
    """A local Cosmos DB server for the session (``lab.local.cosmos``): the settings that
    reach it. Tests use databases or containers of their own. Under CI a failure to start
    fails the test instead of skipping it."""
    server = CosmosServer()
    try:
        server.start()
    except ConfigurationError as e:
        if UNDER_CI:
            pytest.fail(f"the local Cosmos DB server is required under CI and could not start: {e}")
        pytest.skip(f"the local Cosmos DB server is unavailable (run `make deps`): {e}")
    yield server.settings()
    server.stop()


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
