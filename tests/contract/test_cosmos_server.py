"""What the local Cosmos DB server (npm ``@vercel/cosmosdb-server``, run by
``lab.local.cosmos``) implements, checked against the service's documented behaviour.

Where the two agree the test says so by its name; where they differ, a test named
``test_divergence_...`` asserts what the local server does, and where the adapter relies on
the service's answer there, ``ServiceAnswers`` (a transport under the SDK) answers as the
service would and the test checks our handling of it (docs/stores.md, Cosmos DB)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import AioHttpTransport
from azure.cosmos import PartitionKey, exceptions
from azure.cosmos.aio import ContainerProxy

from lab.local.cosmos import CosmosServer
from shared.bus.state.document_rows import DocumentRows
from shared.errors import ConfigurationError, OutcomeUnknown, TooLarge
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.table import Entity
from tests.conftest import unique_name
from tests.cosmos import cosmos_database, local_client

pytestmark = pytest.mark.cosmos

SERVICE_MAX_ITEM_BYTES = 2 * 1024 * 1024


@pytest.fixture
async def container(cosmos: CosmosSettings) -> AsyncIterator[ContainerProxy]:
    """A fresh container partitioned by /id, as the adapter's, on its own database."""
    async with local_client(cosmos) as client:
        database = await client.create_database(unique_name("db"))
        yield await database.create_container(unique_name("c"), PartitionKey(path="/id"))
        await client.delete_database(database.id)


async def test_replace_and_delete_hold_only_while_the_etag_matches(
    container: ContainerProxy,
) -> None:
    created = await container.create_item({"id": "a", "n": 1})
    replaced = await container.replace_item(
        "a",
        {"id": "a", "n": 2},
        etag=created["_etag"],
        match_condition=MatchConditions.IfNotModified,
    )

    with pytest.raises(exceptions.CosmosHttpResponseError) as stale:
        await container.replace_item(
            "a",
            {"id": "a", "n": 3},
            etag=created["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    with pytest.raises(exceptions.CosmosHttpResponseError) as stale_delete:
        await container.delete_item(
            "a", "a", etag=created["_etag"], match_condition=MatchConditions.IfNotModified
        )

    assert (stale.value.status_code, stale_delete.value.status_code) == (412, 412)
    assert replaced["_etag"] != created["_etag"]


async def test_a_second_create_of_an_id_conflicts(container: ContainerProxy) -> None:
    await container.create_item({"id": "a"})

    with pytest.raises(exceptions.CosmosHttpResponseError) as conflict:
        await container.create_item({"id": "a"})

    assert conflict.value.status_code == 409


async def test_a_conditional_write_of_an_absent_item_answers_404(container: ContainerProxy) -> None:
    for write in (
        container.replace_item(
            "x", {"id": "x"}, etag='"e"', match_condition=MatchConditions.IfNotModified
        ),
        container.delete_item("x", "x", etag='"e"', match_condition=MatchConditions.IfNotModified),
    ):
        with pytest.raises(exceptions.CosmosHttpResponseError) as gone:
            await write
        assert gone.value.status_code == 404


async def test_queries_take_parameters_top_and_order_by(container: ContainerProxy) -> None:
    for key in ["c", "a", "e", "b", "d"]:
        await container.create_item({"id": key})

    found = [
        item["id"]
        async for item in container.query_items(
            "SELECT TOP @n * FROM c WHERE c.id > @after ORDER BY c.id",
            parameters=[{"name": "@n", "value": 2}, {"name": "@after", "value": "b"}],
        )
    ]

    assert found == ["c", "d"]


async def test_continuation_tokens_page_an_order_by_query(container: ContainerProxy) -> None:
    for key in ["c", "a", "e", "b", "d"]:
        await container.create_item({"id": key})

    pages = container.query_items("SELECT * FROM c ORDER BY c.id", max_item_count=2).by_page()
    seen = [[item["id"] async for item in page] async for page in pages]

    assert seen == [["a", "b"], ["c", "d"], ["e"]]


async def test_divergence_an_item_over_2_mb_is_accepted(container: ContainerProxy) -> None:
    """The service refuses an item over 2 MB with 413; the local server stores it."""
    big = {"id": "big", "text": "x" * SERVICE_MAX_ITEM_BYTES}

    await container.create_item(big)

    assert len((await container.read_item("big", "big"))["text"]) == SERVICE_MAX_ITEM_BYTES


async def test_divergence_a_transactional_batch_is_not_atomic(container: ContainerProxy) -> None:
    """The service applies a batch all or nothing; the local server keeps the operations
    before the one that failed. A store built on batches could not be tested here."""
    await container.create_item({"id": "taken"})

    with pytest.raises(exceptions.CosmosBatchOperationError):
        await container.execute_item_batch(
            [("create", ({"id": "new"},)), ("create", ({"id": "taken"},))],
            partition_key="new",
        )

    kept = await container.read_item("new", "new")  # the service would answer 404
    assert kept["id"] == "new"


@pytest.fixture(scope="module")
def packaged() -> Iterator[CosmosSettings]:
    """The package's own command, without lab/local/cosmos_server.js's fix."""
    server = CosmosServer(fixed=False)
    try:
        server.start()
    except ConfigurationError as e:
        pytest.skip(f"the local Cosmos DB server is unavailable: {e}")
    yield server.settings()
    server.stop()


async def test_divergence_the_packaged_server_fails_a_point_read_of_an_absent_item(
    packaged: CosmosSettings, cosmos: CosmosSettings
) -> None:
    """The service answers 404; the packaged server crashes in its partition-key check
    (500). The launcher marks point reads so that the server skips that check: 404."""
    answers = []
    for settings in (packaged, cosmos):
        async with local_client(settings, retry_total=0) as client:
            database = await client.create_database(unique_name("db"))
            container = await database.create_container("c", PartitionKey(path="/id"))
            with pytest.raises(exceptions.CosmosHttpResponseError) as absent:
                await container.read_item("nothing", "nothing")
            answers.append(absent.value.status_code)
            await client.delete_database(database.id)

    assert answers == [500, 404]


class ServiceAnswers(AioHttpTransport):  # type: ignore[misc]  # the SDK types it as Any
    """The transport of the SDK, answering item writes as the service would where the local
    server does not: ``too_large`` answers 413 to a write whose body exceeds the service's
    item limit (nothing is sent); ``lose`` sends the next so many writes and then drops their
    answer, as a connection lost after the request left. ``writes`` counts item writes sent."""

    def __init__(self, *, too_large: bool = False, lose: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.too_large = too_large
        self.lose = lose
        self.writes = 0

    async def send(self, request: Any, **config: Any) -> Any:
        write = request.method in ("POST", "PUT", "DELETE") and "/docs" in request.url
        body = request.data if isinstance(request.data, (bytes, str)) else b""
        if write and self.too_large and len(body) > SERVICE_MAX_ITEM_BYTES:
            answer = await super().send(_harmless(request), **config)
            answer.status_code = 413
            return answer
        response = await super().send(request, **config)
        if write:
            self.writes += 1
            if self.lose > 0:
                self.lose -= 1
                raise ServiceResponseError(
                    "connection lost", error=aiohttp.ServerDisconnectedError("lost")
                )
        return response


def _harmless(request: Any) -> Any:
    """A read of the account instead of the write: the service would not have stored it."""
    from azure.core.pipeline.transport import HttpRequest

    url = request.url.split("/dbs/")[0] + "/"
    harmless = HttpRequest("GET", url, headers=dict(request.headers))
    harmless.headers.pop("Content-Length", None)
    return harmless


async def test_a_413_from_the_service_is_too_large_and_nothing_is_stored(
    cosmos: CosmosSettings,
) -> None:
    """Our own size check keeps room for the system properties; were it short, the service's
    413 is ``TooLarge`` (parked, never retried) and nothing is written."""
    transport = ServiceAnswers(too_large=True, connection_verify=False)
    name = unique_name("e")
    async with cosmos_database(
        cosmos, [name], max_bytes=3 * 1024 * 1024, transport=transport
    ) as database:
        documents = database.endpoint_documents(name)
        with pytest.raises(TooLarge, match="413"):
            await documents.create("p1", {"text": "x" * SERVICE_MAX_ITEM_BYTES})

        assert await documents.read("p1") is None


async def test_a_write_whose_answer_is_lost_is_sent_once_and_its_outcome_unknown(
    cosmos: CosmosSettings,
) -> None:
    transport = ServiceAnswers(lose=1, connection_verify=False)
    name = unique_name("e")
    async with cosmos_database(cosmos, [name], transport=transport) as database:
        documents = database.endpoint_documents(name)
        with pytest.raises(OutcomeUnknown):
            await documents.create("p1", {"n": 1})

        assert transport.writes == 1  # the SDK did not send it again
        found = await documents.read("p1")
        assert found is not None  # it landed
        assert found.content == {"n": 1}


async def test_rows_know_their_write_landed_when_a_retried_write_conflicts(
    cosmos: CosmosSettings,
) -> None:
    """Were a write retried after its answer was lost (the service's 409 or 412 to our own
    change), the rows find their write id in the document and count it as landed."""
    transport = ServiceAnswers(connection_verify=False)
    name = unique_name("e")
    async with cosmos_database(cosmos, [name], transport=transport) as database:
        documents = database.endpoint_documents(name)
        rows = DocumentRows(documents)
        original = documents.create
        calls: list[str] = []

        async def create_twice(key: str, content: dict[str, Any]) -> str:
            calls.append(key)
            await original(key, content)  # lands
            return await original(key, content)  # the retry answers 409

        documents.create = create_twice  # type: ignore[method-assign]
        await rows.insert(Entity(partition_key="p1", row_key="r1", properties={"v": "1"}))

        assert calls == ["p1"]
        assert (await rows.get("p1", "r1"))["v"] == "1"
