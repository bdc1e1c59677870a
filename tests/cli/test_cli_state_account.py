"""``bus`` with a state account of its own (``BUS_STATE_STORAGE_SETTING``): it names both
accounts, provisions each endpoint's table in the state account, reports the state account in
``status --json``, and refuses, naming it, a state connection that is missing or does not
answer. Run as real processes against two emulators: the session's as the messaging account,
one of this module's as the state account."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.errors import NotFound
from shared.settings import DEV_ACCOUNT, StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.cli.test_cli_account import assert_no_secret, emulator_endpoint, run
from tests.conftest import sample_resources, started_azurite

pytestmark = pytest.mark.azurite

EXIT_CONFIGURATION = 3


@pytest.fixture(scope="module")
def state_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


def with_state(messaging: AzuriteEndpoints, state: str) -> dict[str, str]:
    return {
        "AzureWebJobsStorage": messaging.connection_string,
        "BUS_STATE_STORAGE_SETTING": "AppState",
        "AppState": state,
    }


async def test_provision_and_status_use_the_state_account_and_name_it(
    sample_project: Path, azurite: AzuriteEndpoints, state_azurite: AzuriteEndpoints
) -> None:
    environ = with_state(azurite, state_azurite.connection_string)
    provisioned = run(sample_project, "provision", environ=environ)
    assert provisioned.returncode == 0, provisioned.stderr
    state_line = (
        f"bus (state): account {DEV_ACCOUNT} ({emulator_endpoint(state_azurite)}) "
        "from AppState in the environment"
    )
    assert state_line in provisioned.stderr.splitlines()

    async with AzureStorageAccount(StorageSettings(state_azurite.connection_string)) as state:
        for endpoint in sample_resources().endpoints:
            await state.table(endpoint).query(page_size=1)  # there: no NotFound
        with pytest.raises(NotFound):
            await state.queue(sample_resources().endpoints[0]).approximate_count()

    status = run(sample_project, "status", "--json", environ=environ)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["state_account"] == {
        "name": DEV_ACCOUNT,
        "endpoint": emulator_endpoint(state_azurite),
        "setting": "AppState",
        "source": "environment",
    }
    assert report["account"]["endpoint"] == emulator_endpoint(azurite)
    assert report["missing"] == []
    assert_no_secret(status)


def test_a_state_setting_naming_no_connection_is_refused_by_name(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    environ = {
        "AzureWebJobsStorage": azurite.connection_string,
        "BUS_STATE_STORAGE_SETTING": "AppState",
    }
    result = run(sample_project, "status", environ=environ)
    assert result.returncode == EXIT_CONFIGURATION
    assert "connection setting AppState" in result.stderr
    assert "BUS_STATE_STORAGE_SETTING" in result.stderr


def test_a_state_account_that_does_not_answer_is_named_as_the_state_account(
    sample_project: Path, azurite: AzuriteEndpoints
) -> None:
    nowhere = (
        "DefaultEndpointsProtocol=http;AccountName=nowhere;AccountKey=bm93aGVyZQ==;"
        "BlobEndpoint=http://127.0.0.1:9/nowhere;QueueEndpoint=http://127.0.0.1:9/nowhere;"
        "TableEndpoint=http://127.0.0.1:9/nowhere;"
    )
    environ = {
        **with_state(azurite, nowhere),
        "BUS_STORAGE_CONNECT_TIMEOUT": "1",
        "BUS_STORAGE_READ_TIMEOUT": "1",
        "BUS_STORAGE_CALL_TIMEOUT": "2",
        "BUS_INGRESS_TIMEOUT": "4",
    }
    result = run(sample_project, "status", environ=environ)
    assert result.returncode != 0
    assert "the state account (connection string for account nowhere)" in result.stderr
    assert_no_secret(result)
