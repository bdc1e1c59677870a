"""Fixtures of the bulk tests: one local Spark session for the run, with Spark's own task
retries (``local[2,4]``: four attempts per task, as a cluster's ``spark.task.maxFailures``
gives), and a private Azurite per test provisioned for the sample app, whose resource names
are fixed (so the audit of one test reads only that test's messages).

Under CI a test that needs Spark or Azurite fails when it cannot start; elsewhere it is
skipped with the reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bulk.bus import provision_sample
from tests.conftest import started_azurite
from tests.spark import spark_session

MASTER = "local[2,4]"


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session(
        MASTER,
        app_name="bus-bulk-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.sql.codegen.wholeStage": "false"},
    )


@pytest.fixture
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture
def storage(emulator: AzuriteEndpoints) -> StorageSettings:
    return StorageSettings(connection_string=emulator.connection_string)


@pytest.fixture
async def account(storage: StorageSettings) -> AsyncIterator[AzureStorageAccount]:
    """The emulator's account, provisioned for the sample app and subscribed."""
    opened = AzureStorageAccount(storage)
    try:
        await provision_sample(opened)
        yield opened
    finally:
        await opened.close()
