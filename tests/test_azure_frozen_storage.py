"""A storage account that stops answering (the emulator frozen with SIGSTOP): every store call
ends with the project's OutcomeUnknown within its bound, the same account works again once
storage answers (SIGCONT), and a queue worker backs off and recovers."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import pytest

from shared import http_ingress, runtime
from shared.config import build_config
from shared.errors import OutcomeUnknown
from shared.host_json import QueueSettings
from shared.provisioning import provision
from shared.queue_trigger import QueueWorker
from shared.settings import StorageSettings, StorageTimeouts, resolve_settings
from shared.stores.azure import AzureStorageAccount
from shared.stores.table import Entity, Insert
from tests.conftest import unique_name
from tests.frozen_azurite import FreezableAzurite, started_freezable

pytestmark = pytest.mark.azurite

# Short bounds keep the tests short; the defaults are exercised by the host test.
TIMEOUTS = StorageTimeouts(connect=0.5, read=0.5, call=1.5, ingress=3.0)
SLACK = 1.0
"""Scheduling room on a busy machine beyond the call's own bound."""


@pytest.fixture(scope="module")
def azurite() -> Iterator[FreezableAzurite]:
    yield from started_freezable()


@dataclass
class Stores:
    account: AzureStorageAccount
    container: str
    table: str
    queue: str


@pytest.fixture
async def stores(azurite: FreezableAzurite) -> AsyncIterator[Stores]:
    # The stores are made with the default bounds: the short ones are for the calls under
    # test, and a set-up call slower than half a second on a busy machine is not one.
    setup = AzureStorageAccount(StorageSettings(azurite.connection_string))
    account = AzureStorageAccount(StorageSettings(azurite.connection_string, timeouts=TIMEOUTS))
    try:
        made = Stores(account, unique_name("frozen"), unique_name("frozen"), unique_name("frozen"))
        await setup.blob_container(made.container).create_if_missing()
        await setup.blob_container(made.container).create("present", b"data")
        await setup.table(made.table).create_if_missing()
        await setup.table(made.table).insert(Entity("p", "r", {"n": 1}))
        await setup.queue(made.queue).create_if_missing()
        yield made
    finally:
        await setup.close()
        await account.close()


async def blob_read(s: Stores) -> object:
    return await s.account.blob_container(s.container).read("present")


async def blob_create(s: Stores) -> object:
    return await s.account.blob_container(s.container).create(unique_name("new"), b"x")


async def table_query(s: Stores) -> object:
    return await s.account.table(s.table).query(partition_key="p")


async def table_transaction(s: Stores) -> object:
    return await s.account.table(s.table).transact([Insert(Entity("p", unique_name("r"), {}))])


async def queue_receive(s: Stores) -> object:
    return await s.account.queue(s.queue).receive(1)


async def queue_send(s: Stores) -> object:
    return await s.account.queue(s.queue).send("hello")


CALLS: list[Callable[[Stores], Awaitable[object]]] = [
    blob_read,
    blob_create,
    table_query,
    table_transaction,
    queue_receive,
    queue_send,
]


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.__name__)
async def test_a_call_to_frozen_storage_ends_as_outcome_unknown_within_its_bound(
    azurite: FreezableAzurite, stores: Stores, call: Callable[[Stores], Awaitable[object]]
) -> None:
    await call(stores)  # the connection is open and pooled, as on a busy host
    with azurite.frozen():
        started = time.monotonic()
        with pytest.raises(OutcomeUnknown, match=r"no (answer|response) from storage"):
            await call(stores)
        elapsed = time.monotonic() - started
    assert elapsed < TIMEOUTS.call + SLACK
    await call(stores)  # the same account and clients work again once storage answers


class Seen(logging.Handler):
    """Sets ``event`` when a log record containing ``text`` is emitted."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


async def test_a_queue_worker_backs_off_while_storage_is_frozen_and_recovers(
    azurite: FreezableAzurite, stores: Stores
) -> None:
    handled: list[str] = []
    got_one = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        handled.append(content)
        got_one.set()

    settings = QueueSettings(max_polling_interval=0.5, lease_seconds=10)
    worker = QueueWorker(stores.account, stores.queue, handler, settings)
    failed = Seen("receive failed")
    worker_log = logging.getLogger("shared.queue_trigger")
    worker_log.addHandler(failed)
    stopping = asyncio.Event()
    running = asyncio.create_task(worker.run(stopping))
    try:
        with azurite.frozen():
            # The worker's receive fails within the call bound, and the worker carries on.
            await asyncio.wait_for(failed.event.wait(), TIMEOUTS.call + 2 * SLACK)
            assert not running.done(), "the worker stopped on a storage failure"
        await stores.account.queue(stores.queue).send("after the thaw")
        await asyncio.wait_for(got_one.wait(), 10)
        assert handled == ["after the thaw"]
        assert not running.done()
    finally:
        worker_log.removeHandler(failed)
        stopping.set()
        await running
    assert await stores.account.queue(stores.queue).approximate_count() == 0


@pytest.fixture(scope="module")
def healthy() -> Iterator[FreezableAzurite]:
    yield from started_freezable()  # never frozen; private because the app's names are fixed


def split_connection_string(blobs: FreezableAzurite, rest: FreezableAzurite) -> str:
    """One account whose blob service is ``blobs`` and whose tables and queues are ``rest``."""
    assert blobs.endpoints is not None
    assert rest.endpoints is not None
    return rest.connection_string.replace(
        f"BlobEndpoint={rest.endpoints.blob}/", f"BlobEndpoint={blobs.endpoints.blob}/"
    )


async def test_the_ingress_answers_503_at_its_deadline_when_each_call_keeps_within_its_own(
    azurite: FreezableAzurite, healthy: FreezableAzurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the blob service freezes: the ingress record is read, then every token create
    times out on its own and is retried with a new attempt id, each within the call bound.
    The request as a whole still ends at BUS_INGRESS_TIMEOUT, and the retry with the same key
    succeeds once storage answers."""
    for variable, seconds in [
        ("BUS_STORAGE_CONNECT_TIMEOUT", "1"),
        ("BUS_STORAGE_READ_TIMEOUT", "1"),
        ("BUS_STORAGE_CALL_TIMEOUT", "1.4"),
        ("BUS_INGRESS_TIMEOUT", "1.5"),
    ]:
        monkeypatch.setenv(variable, seconds)
    timeouts = build_config(resolve_settings(local_file=None)).timeouts
    settings = StorageSettings(split_connection_string(azurite, healthy), timeouts=timeouts)
    order = {"type": "PlaceOrder", "to": "orders", "body": {"order_id": "o9", "customer": "c"}}
    order["body"] = {**order["body"], "amount_cents": 900}  # type: ignore[dict-item]
    raw = json.dumps(order).encode()
    headers = {"Idempotency-Key": "split-o9"}
    async with AzureStorageAccount(settings) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        bus = worker.bus()
        await bus.subscribe_all()
        with azurite.frozen():
            started = time.monotonic()
            status, answer = await worker.ingress(headers, raw)
            elapsed = time.monotonic() - started
        assert status == 503
        assert json.loads(answer)["error"].startswith("storage did not answer within 1.5 s")
        assert timeouts.ingress <= elapsed < timeouts.ingress + SLACK
        status, answer = await worker.ingress(headers, raw)
        retried = http_ingress.Answer(status, json.loads(answer))
        assert retried.status == 202, retried.body
        signals = await account.queue("orders").peek()
        assert [json.loads(m.content)["message_id"] for m in signals] == retried.body["message_ids"]
