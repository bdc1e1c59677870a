"""Queue polling with host.json semantics, on the in-memory stores and on Azurite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from shared.errors import ConfigurationError
from shared.host.queue_worker import QueueSettings, QueueWorker
from shared.local.azurite import AzuriteEndpoints
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
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


async def test_a_message_failing_max_dequeue_count_times_moves_to_the_poison_queue(
    backend: Backend,
) -> None:
    name = await make_queue(backend)
    await backend.account.queue(name).send('{"original": true}')
    tries: list[int] = []
    done = asyncio.Event()

    async def handler(content: str, dequeue_count: int) -> None:
        tries.append(dequeue_count)
        if dequeue_count == 3:
            done.set()
        raise RuntimeError("business rule broken")

    settings = QueueSettings(max_dequeue_count=3, visibility_timeout=0)
    await run_until(QueueWorker(backend.account, name, handler, settings), done)
    assert tries == [1, 2, 3]
    [parked] = await backend.account.queue(poison_queue(name)).peek()
    assert parked.content == '{"original": true}'
    assert await backend.account.queue(name).approximate_count() == 0


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
