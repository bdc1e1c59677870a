"""``bus provision`` creates the Cosmos DB database and a container per ``store="cosmos"``
endpoint (partition key ``/id``), idempotently, and a worker of such an app refuses to start
without an account."""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.cosmos import PartitionKey

from shared.bus import BusApp
from shared.bus.state.document_rows import DocumentRows
from shared.bus.state.stores import StateDocuments
from shared.cli.commands import provision_command
from shared.errors import ConfigurationError
from shared.resources import resources_json
from shared.runtime import Worker
from shared.settings import Settings
from shared.stores.cosmos.documents import CosmosDocuments
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import unique_name
from tests.cosmos import local_client


def cosmos_app() -> BusApp:
    app = BusApp()
    app.endpoint("ledger", store="cosmos")
    app.endpoint("orders")
    return app


def cosmos_worker(settings: CosmosSettings, database: str) -> Worker:
    assert settings.endpoint is not None
    assert settings.key is not None
    values = {
        "BUS_COSMOS_ENDPOINT": settings.endpoint,
        "BUS_COSMOS_KEY": settings.key,
        "BUS_COSMOS_DATABASE": database,
    }
    return Worker(cosmos_app(), Settings(values, {}), MemoryStorageAccount())


@pytest.mark.cosmos
async def test_provision_creates_the_database_and_containers_once(
    cosmos: CosmosSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = unique_name("db")
    worker = cosmos_worker(cosmos, database)
    resources = tmp_path / "resources.json"
    resources.write_text(resources_json(worker.resources))

    try:
        assert await provision_command(worker, resources) == 0
        first = capsys.readouterr().out
        assert await provision_command(worker, resources) == 0
        second = capsys.readouterr().out
    finally:
        await worker.close()

    for out in (first, second):
        assert f"Cosmos DB database {database}: ready" in out
        assert f"Cosmos DB container {database}/ledger (partition key /id)" in out
        assert f"{database}/orders" not in out  # a table endpoint has no container
        assert str(cosmos.key) not in out
    async with local_client(cosmos) as client:
        properties = (
            await client.get_database_client(database).get_container_client("ledger").read()
        )
        await client.delete_database(database)
    assert properties["partitionKey"]["paths"] == ["/id"]


@pytest.mark.cosmos
async def test_a_container_with_another_partition_key_is_refused(
    cosmos: CosmosSettings, tmp_path: Path
) -> None:
    database = unique_name("db")
    async with local_client(cosmos) as client:
        made = await client.create_database(database)
        await made.create_container("ledger", PartitionKey(path="/pk"))
        worker = cosmos_worker(cosmos, database)
        resources = tmp_path / "resources.json"
        resources.write_text(resources_json(worker.resources))
        try:
            with pytest.raises(ConfigurationError, match="partition key"):
                await provision_command(worker, resources)
        finally:
            await worker.close()
            await client.delete_database(database)


def test_a_cosmos_endpoint_without_an_account_stops_start_up() -> None:
    with pytest.raises(ConfigurationError, match=r"ledger.*BUS_COSMOS_ENDPOINT"):
        Worker(cosmos_app(), Settings({}, {}), MemoryStorageAccount())


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("BUS_COSMOS_ENDPOINT", "http://account.documents.azure.com/", "https://"),
        ("BUS_COSMOS_ENDPOINT", "https://user@account.documents.azure.com/", "https://"),
        ("BUS_COSMOS_KEY", "not base64 at all!", "not shown"),
        ("BUS_COSMOS_DATABASE", "a/b", "no /"),
    ],
)
def test_bad_cosmos_settings_are_refused_by_name(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=name) as refused:
        Worker(BusApp(), Settings({name: value}, {}), MemoryStorageAccount())
    assert problem in str(refused.value)
    if name == "BUS_COSMOS_KEY":
        assert value not in str(refused.value)


async def test_the_worker_gives_its_cosmos_database_to_the_bus_and_the_cleanup() -> None:
    settings = CosmosSettings("https://127.0.0.1:1/", "a2V5", "bus")
    worker = cosmos_worker(settings, "bus")

    rows = worker.endpoint_rows()
    bus = worker.bus()
    database = worker.cosmos()

    assert isinstance(rows["ledger"], DocumentRows)
    documents = rows["ledger"].documents
    assert isinstance(documents, StateDocuments)  # no answer: the state store is down
    assert isinstance(documents.inner, CosmosDocuments)
    assert bus.cosmos is database
    assert database is not None
    await worker.close()
    assert worker.cosmos() is not database  # reopened on next use, the old one closed
    await worker.close()
