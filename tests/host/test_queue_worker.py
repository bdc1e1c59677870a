"""Queue polling with host.json semantics, on the in-memory stores and on Azurite."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure.storage.queue.aio import QueueClient

from lab.local.azurite import AzuriteEndpoints
from shared.bus.poison import unwrap
from shared.errors import ConfigurationError
from shared.host_json import QueueSettings
from shared.queue_trigger import QueueWorker
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.queue import QueueMessage
from tests.conftest import Backend, unique_name

REPO = Path(__file__).resolve().parents[2]


async def make_queue(backend: Backend) -> str:
    name = unique_name("q")
    for queue in (name, poison_queue(name)):
        await backend.account.queue(queue).create_if_missing()
    return name


async def run_until(worker: QueueWorker, done: asyncio.Event, seconds: float = 20.0) -> None:
    stopping = asyncio.Event()
    running = asyncio.create_task(worker.run(stopping))
    try:
        await asyncio.wait_for(done.wait(), seconds)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 10)


async def test_run_delivers_every_message_once_and_stops_when_asked(backend: Backend) -> None:
    name = await make_queue(backend)
    queue = backend.account.queue(name)
    for i in range(40):
        await queue.send(f"m{i}")
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        seen.append(content)
        if len(seen) == 40:
            done.set()

    await run_until(QueueWorker(backend.account, name, handler, QueueSettings()), done)
    assert sorted(seen) == sorted(f"m{i}" for i in range(40))
    assert await queue.approximate_count() == 0


async def test_a_message_failing_max_dequeue_count_times_moves_to_poison_with_its_last_error(
    backend: Backend,
) -> None:
    name = await make_queue(backend)
    original = '{"message_id": "m-1", "original": true}'
    await backend.account.queue(name).send(original)
    tries: list[int] = []
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        tries.append(dequeue_count)
        if dequeue_count == 3:
            done.set()
        error = RuntimeError(f"business rule broken on try {dequeue_count}")
        error.add_note("receiving message m-1 of type ChargePayment")
        raise error

    settings = QueueSettings(max_dequeue_count=3, visibility_timeout=0)
    await run_until(QueueWorker(backend.account, name, handler, settings), done)
    assert tries == [1, 2, 3]
    [parked] = await backend.account.queue(poison_queue(name)).peek()
    unwrapped = unwrap(parked.content, name)
    assert unwrapped.signal == original  # replays unchanged
    assert unwrapped.info["error_type"] == "RuntimeError"
    assert unwrapped.info["endpoint"] == name
    assert unwrapped.info["message_id"] == "m-1"
    assert unwrapped.info["dequeue_count"] == 3
    assert unwrapped.reason == (
        "RuntimeError: business rule broken on try 3 (receiving message m-1 of type ChargePayment)"
    )
    assert await backend.account.queue(name).approximate_count() == 0


async def test_a_failure_is_logged_with_its_type_and_traceback_and_the_worker_carries_on(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    name = await make_queue(backend)
    boom = '{"message_id": "m-boom\\n"}'  # what a signal names, escaped in the line
    for content in (boom, "fine"):
        await backend.account.queue(name).send(content)
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        if content == boom and dequeue_count == 1:
            raise KeyError("no such thing")
        handled.append(content)
        if len(handled) == 2:
            done.set()

    settings = QueueSettings(visibility_timeout=0)
    with caplog.at_level(logging.WARNING, "shared.queue_trigger"):
        await run_until(QueueWorker(backend.account, name, handler, settings), done)
    assert sorted(handled) == sorted([boom, "fine"])
    [failure] = [r for r in caplog.records if "failed (try" in r.getMessage()]
    assert failure.getMessage().endswith("failed (try 1 of 5): KeyError: 'no such thing'")
    # The bus's message id first, then the queue's own.
    assert f"queue {name}: message m-boom\\n (queue message " in failure.getMessage()
    assert failure.exc_info is not None
    assert failure.exc_info[0] is KeyError


async def test_a_message_too_large_to_move_beside_its_error_naming_no_token_is_excerpted(
    backend: Backend,
) -> None:
    """47,000 quotes fit a queue message; escaped in a JSON wrapper they do not. They name no
    token, so whoever sent them could only write to the queue: the move keeps a bounded
    excerpt and the digest of the whole, and writes no blob."""
    name = await make_queue(backend)
    container = unique_name("parked")
    await backend.account.blob_container(container).create_if_missing()
    original = '"' * 47_000
    await backend.account.queue(name).send(original)
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        done.set()
        raise RuntimeError("cannot handle this")

    settings = QueueSettings(max_dequeue_count=1, parked_container=container)
    await run_until(QueueWorker(backend.account, name, handler, settings), done)
    await asyncio.sleep(0.2)  # the move runs after the handler returned
    [parked] = await backend.account.queue(poison_queue(name)).peek()
    unwrapped = unwrap(parked.content, name)
    assert unwrapped.signal is None
    assert unwrapped.original is None
    assert unwrapped.excerpt_only
    assert unwrapped.reason == "RuntimeError: cannot handle this"
    assert unwrapped.info["sha256"] == hashlib.sha256(original.encode()).hexdigest()
    assert unwrapped.info["chars"] == len(original)
    assert parked.expires_on is None
    assert [b async for b in backend.account.blob_container(container).list()] == []
    assert await backend.account.queue(name).approximate_count() == 0


@pytest.mark.azurite
async def test_no_raw_message_content_stops_a_worker(azurite: AzuriteEndpoints) -> None:
    """Messages written by other tools, not base64: non-ASCII text, base64 of bytes that are
    not UTF-8, empty. Each reaches the function as text; the worker keeps running."""
    account = AzureStorageAccount(StorageSettings(azurite.connection_string))
    name = await make_queue(Backend("azurite", account))
    hostile = ["ünïcödé ☃ {", base64.b64encode(b"\xff\xfe\x00 not utf-8").decode(), " "]
    async with QueueClient.from_connection_string(azurite.connection_string, name) as raw:
        for wire in hostile:
            await raw.send_message(wire)
    await account.queue(name).send("valid")
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        seen.append(content)
        if len(seen) == 4:
            done.set()

    await run_until(QueueWorker(account, name, handler, QueueSettings()), done, seconds=10)
    assert sorted(seen) == sorted([*hostile, "valid"])  # what cannot be decoded comes as sent
    assert await account.queue(name).approximate_count() == 0
    await account.close()


async def test_a_failed_message_comes_back_after_the_visibility_timeout(backend: Backend) -> None:
    name = await make_queue(backend)
    queue = backend.account.queue(name)
    await queue.send("flaky")
    calls: list[int] = []

    async def handler(content: str, dequeue_count: int) -> None:
        calls.append(dequeue_count)
        if dequeue_count == 1:
            raise RuntimeError("first try fails")

    worker = QueueWorker(backend.account, name, handler, QueueSettings(visibility_timeout=1))
    assert await worker.poll_once() == 1
    assert await worker.poll_once() == 0  # hidden for the visibility timeout
    await backend.elapse(1.5)
    assert await worker.poll_once() == 1
    assert calls == [1, 2]
    assert await queue.approximate_count() == 0


async def test_a_new_batch_is_fetched_once_running_drops_to_new_batch_threshold(
    backend: Backend,
) -> None:
    """batchSize 4, newBatchThreshold 2: never more than 6 running, and more than 4 at times
    (the next batch starts before the first is finished)."""
    name = await make_queue(backend)
    for i in range(24):
        await backend.account.queue(name).send(f"m{i}")
    running = peak = handled = 0
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        nonlocal running, peak, handled
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05 if content[-1] in "02468" else 0.3)
        running -= 1
        handled += 1
        if handled == 24:
            done.set()

    settings = QueueSettings(batch_size=4, new_batch_threshold=2)
    await run_until(QueueWorker(backend.account, name, handler, settings), done)
    assert 4 < peak <= 6


@pytest.mark.azurite
async def test_the_lease_is_renewed_while_a_slow_function_runs(azurite: AzuriteEndpoints) -> None:
    """Lease expiry needs real time, so this runs on Azurite only."""
    account = AzureStorageAccount(StorageSettings(azurite.connection_string))
    backend = Backend("azurite", account)
    name = await make_queue(backend)
    queue = account.queue(name)
    await queue.send("slow")
    started, finished = asyncio.Event(), asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        started.set()
        await asyncio.sleep(3.5)

    worker = QueueWorker(account, name, handler, QueueSettings(lease_seconds=2, renew_lease=True))
    task = asyncio.create_task(worker.run_one((await queue.receive(1, visibility_timeout=2))[0]))
    task.add_done_callback(lambda _: finished.set())
    await started.wait()
    await asyncio.sleep(2.8)  # past the first lease: only renewal keeps it hidden
    assert await queue.receive(1, visibility_timeout=1) == []
    await finished.wait()
    assert task.result() is True  # acknowledged with the renewed pop receipt
    assert await queue.approximate_count() == 0
    await account.close()


def test_settings_come_from_the_repository_host_json() -> None:
    settings = QueueSettings.from_host_json(REPO / "host.json")
    host = json.loads((REPO / "host.json").read_text())["extensions"]["queues"]
    assert settings.batch_size == host["batchSize"]
    assert settings.new_batch_threshold == host["newBatchThreshold"]
    assert settings.max_dequeue_count == host["maxDequeueCount"]
    assert settings.visibility_timeout == 10
    assert settings.max_polling_interval == 2


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ({"messageEncoding": "none"}, "messageEncoding 'none' is not supported"),
        ({"visibilityTimeout": "ten seconds"}, "invalid time span"),
        ({"batchSize": 64}, "batchSize must be 1-32"),
    ],
)
def test_bad_host_json_is_refused(tmp_path: Path, queues: dict[str, object], message: str) -> None:
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"version": "2.0", "extensions": {"queues": queues}}))
    with pytest.raises(ConfigurationError, match=message):
        QueueSettings.from_host_json(path)


async def test_a_message_moved_after_its_last_try_says_when_it_was_enqueued_and_failed(
    backend: Backend,
) -> None:
    """The function gets the whole message (as a Functions binding does); a failure outside
    the bus's own parking is moved with the message's insertion time and the failure's."""
    name = await make_queue(backend)
    await backend.account.queue(name).send("signal")
    got: list[QueueMessage] = []
    done = asyncio.Event()

    async def handler(message: QueueMessage) -> None:
        got.append(message)
        done.set()
        raise TimeoutError("handler timed out")

    settings = QueueSettings(max_dequeue_count=1)
    before = datetime.now(UTC).replace(microsecond=0)
    worker = QueueWorker(backend.account, name, None, settings, message_handler=handler)
    await run_until(worker, done)
    await asyncio.sleep(0.2)  # the move runs after the handler returned
    after = datetime.now(UTC)

    [message] = got
    assert (message.content, message.dequeue_count) == ("signal", 1)
    [parked] = await backend.account.queue(poison_queue(name)).peek()
    info = unwrap(parked.content, name).info
    assert info["enqueued_at"] == message.inserted_on.astimezone(UTC).isoformat(timespec="seconds")
    assert before <= datetime.fromisoformat(info["failed_at"]) <= after


def test_a_queue_worker_takes_one_kind_of_handler(backend: Backend) -> None:
    async def content(text: str, count: int) -> None: ...

    async def whole(message: QueueMessage) -> None: ...

    with pytest.raises(ConfigurationError, match="a handler or a message_handler"):
        QueueWorker(backend.account, "q", content, message_handler=whole)
    with pytest.raises(ConfigurationError, match="a handler or a message_handler"):
        QueueWorker(backend.account, "q", None)
