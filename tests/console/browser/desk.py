"""The desk app's storage on an emulator, set up as an operator would find it: messages sent
through the ingress, some processed, some failed on their last try and parked with their
tokens kept, and parked messages written directly where a test needs hundreds of them or
values no sender could choose (a hostile message type).

Playwright's sync API keeps an event loop running in the test's thread, where
``asyncio.run`` is refused: every storage step here runs on a loop of its own thread
(``blocking``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.bus.envelope import bus_message_id
from shared.bus.pipeline import Outcome
from shared.bus.poison import Reason, poison_body
from shared.provisioning import provision
from shared.resources import CONTAINERS, poison_queue
from shared.runtime import Worker
from shared.settings import Settings, StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.console.browser.desk_app import BOOKINGS, TALLY, Book, app

T = TypeVar("T")
ENDPOINTS = (BOOKINGS, TALLY)
SENDER = "frontdesk"
"""The ingress client the tests send as: a sender outside the app."""
SEND_AT_ONCE = 50


def blocking(work: Callable[[], Awaitable[T]]) -> T:
    """``work()`` run to completion on an event loop of a thread of its own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(_awaited(work))).result()


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


def synthetic_parked(
    endpoint: str, message_id: str, *, message_type: str, error_type: str, reason: str
) -> str:
    """A poison message as the pipeline parks one, written directly: its signal names a token
    that does not exist (a replay sends it back; the receiver finds no token and drops it)."""
    signal = json.dumps(
        {
            "message_id": message_id,
            "attempt_id": f"a-{message_id}",
            "token": f"tokens/tests/{message_id}",
            "partition_key": "p1",
        }
    )
    why = Reason(
        endpoint,
        reason,
        5,
        error_type=error_type,
        message_id=message_id,
        message_type=message_type,
        enqueued_at="2026-01-01T12:00:00+00:00",
        failed_at="2026-01-01T12:00:40+00:00",
    )
    return poison_body(signal, why)


@dataclass(frozen=True)
class DeskStorage:
    connection_string: str

    @asynccontextmanager
    async def _worker(self) -> AsyncIterator[Worker]:
        async with AzureStorageAccount(StorageSettings(self.connection_string)) as account:
            worker = Worker(app, Settings({}, {}), account)
            try:
                yield worker
            finally:
                await worker.close()

    def provision(self) -> None:
        """Every queue, container and table of the desk app, and its recipient lists."""

        async def go() -> None:
            async with self._worker() as worker:
                await provision(worker.account(), worker.resources)
                await worker.bus().subscribe_all()

        blocking(go)

    def clear(self) -> None:
        """Every queue and poison queue of the app emptied."""

        async def go() -> None:
            async with self._worker() as worker:
                for endpoint in ENDPOINTS:
                    await worker.account().queue(endpoint).clear()
                    await worker.account().queue(poison_queue(endpoint)).clear()

        blocking(go)

    def book(self, ref: str, **fields: Any) -> str:
        """A Book sent to ``bookings`` through the ingress (its key: ``ref``); its message id."""

        async def go() -> str:
            async with self._worker() as worker:
                client = worker.bus().client(SENDER)
                receipt = await client.send(
                    Book(ref=ref, **fields), to=BOOKINGS, idempotency_key=ref
                )
                [message_id] = receipt.as_json()["message_ids"]
                return str(message_id)

        return blocking(go)

    def fail(self, ref: str, note: str = "") -> str:
        """A Book whose handler fails on its last try: parked with its token kept."""
        message_id = self.book(ref, note=note, fail=True)
        assert self._deliver(BOOKINGS, message_id, last_try=True) is Outcome.POISONED
        return message_id

    def fail_tally(self, ref: str, note: str) -> None:
        """A Book processed, whose Booked (``note`` in its header) fails at ``tally`` on its
        last try. Nothing else may be waiting in either queue."""
        self.book(ref, note=note, fail_tally=True)
        assert self.process(BOOKINGS) == [Outcome.PROCESSED]
        assert self.process(TALLY, last_try=True) == [Outcome.POISONED]

    def process(self, endpoint: str, *, last_try: bool = False) -> list[Outcome]:
        """Every message waiting in ``endpoint``'s queue delivered, as the function app
        delivers it (on the last try: a failure parks it); their outcomes."""

        async def go() -> list[Outcome]:
            outcomes = []
            async with self._worker() as worker:
                tries = (worker.config.max_dequeue_count or 5) if last_try else 1
                queue = worker.account().queue(endpoint)
                while batch := await queue.receive(32, visibility_timeout=60):
                    for message in batch:
                        body = message.content.encode()
                        outcomes.append(await worker.receive(endpoint, body, tries))
                        await queue.delete(message.id, message.pop_receipt)
            return outcomes

        return blocking(go)

    def _deliver(self, endpoint: str, message_id: str, *, last_try: bool) -> Outcome:
        async def go() -> Outcome:
            async with self._worker() as worker:
                queue = worker.account().queue(endpoint)
                for message in await queue.receive(32, visibility_timeout=60):
                    if bus_message_id(message.content) != message_id:
                        await queue.update(message.id, message.pop_receipt, visibility_timeout=0)
                        continue
                    tries = (worker.config.max_dequeue_count or 5) if last_try else 1
                    outcome = await worker.receive(
                        endpoint, message.content.encode(), tries, message.inserted_on
                    )
                    await queue.delete(message.id, message.pop_receipt)
                    return outcome
            raise AssertionError(f"message {message_id} is not waiting in {endpoint}")

        return blocking(go)

    def park(self, endpoint: str, contents: list[str]) -> None:
        """``contents`` written to ``endpoint``'s poison queue, as they are."""

        async def go() -> None:
            async with self._worker() as worker:
                poison = worker.account().queue(poison_queue(endpoint))
                for start in range(0, len(contents), SEND_AT_ONCE):
                    batch = contents[start : start + SEND_AT_ONCE]
                    await asyncio.gather(*(poison.send(content) for content in batch))

        blocking(go)

    def depth(self, queue: str) -> int:
        async def go() -> int:
            async with self._worker() as worker:
                return await worker.account().queue(queue).approximate_count()

        return blocking(go)

    def archived(self) -> Iterator[dict[str, Any]]:
        """Every entry of the discard archive, with its ``keep_until`` metadata."""

        async def go() -> list[dict[str, Any]]:
            entries = []
            async with self._worker() as worker:
                archive = worker.account().blob_container(CONTAINERS["discarded"])
                async for blob in archive.list():
                    read = await archive.read(blob.name)
                    entry: dict[str, Any] = json.loads(read.data)
                    entry["keep_until_metadata"] = read.metadata.get("keep_until")
                    entries.append(entry)
            return entries

        return iter(blocking(go))
