"""Listing a poison queue that anyone with queue send can fill: the pass holds what each entry
shows, not the entries' contents, stops at its limit saying so, and ends when the queue is
exhausted, not on a batch it has seen before."""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus import parked_pass
from shared.bus.parked_pages import parked_page
from shared.bus.parked_pass import LOOK_SECONDS, PEEK_LIMIT
from shared.bus.poison import Reason, poison_body
from shared.clock import ManualClock
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import Instrumentation, InstrumentedAccount, Operation
from shared.stores.memory import MemoryStorageAccount
from shared.stores.queue import MessageQueue
from tests.conftest import Backend, unique_name

T = TypeVar("T")

LARGE = 40_000
"""Characters of each forged entry's body: a queue message holds 64 KiB."""


def large_entry(i: int, endpoint: str) -> str:
    body = json.dumps({"message_id": f"m-{i}", "filler": "x" * LARGE})
    return poison_body(body, Reason(endpoint, f"forged {i}", 5, message_id=f"m-{i}"))


async def filled(account: StorageAccount, entries: int) -> tuple[MessageQueue, str]:
    endpoint = unique_name("flood")[:40]
    queue = account.queue(poison_queue(endpoint))
    await queue.create_if_missing()
    sent = 0
    while sent < entries:
        batch = range(sent, min(sent + 16, entries))
        await asyncio.gather(*(queue.send(large_entry(i, endpoint)) for i in batch))
        sent += len(batch)
    return queue, endpoint


def held_chars(entries: list[dict[str, Any]]) -> int:
    return sum(len(str(value)) for entry in entries for value in entry.values())


async def collect_first(operation: Operation) -> None:
    """Before every receive: the storage SDK's answers hold reference cycles, which the
    collector frees only now and then, so that garbage would pile up beside what the pass
    holds; collecting before each batch measures what is held."""
    if operation.kind in ("queue.receive", "queue.peek"):
        gc.collect()


async def traced_peak(look: Awaitable[T]) -> tuple[T, int]:
    """What ``look`` returns, and the most memory live at once while it ran."""
    gc.collect()
    tracemalloc.start()
    try:
        found = await look
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.azurite
async def test_a_queue_of_large_entries_is_listed_whole_holding_a_batch_of_them_at_most(
    azurite: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pass's time bound keeps it within its messages' hold in production; here it would
    # make the outcome depend on how loaded the machine is (a loaded CI run took longer than
    # the 15 s to receive 400 entries of 40,000 characters from Azurite and said incomplete).
    # What this test counts is what the pass holds, so the bound is lifted for it; the pass
    # still makes sure of every message once however long it runs (PassedOver).
    monkeypatch.setattr(parked_pass, "PASS_SECONDS", 3600.0)
    entries = 400
    azure = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    _, endpoint = await filled(azure, entries)
    account = InstrumentedAccount(azure, Instrumentation(on_operation=collect_first))
    queue = account.queue(poison_queue(endpoint))
    bodies = entries * LARGE
    _, batch = await traced_peak(queue.peek(PEEK_LIMIT))  # what one batch of them costs

    page, peak = await traced_peak(parked_page(queue, endpoint, limit=1000))

    assert page.complete
    assert len(page.entries) == entries
    assert held_chars(page.entries) < entries * 400  # what a row shows, not the body
    # A batch of 32 bodies costs what the SDK makes of the service's answer: the pass holds
    # one batch at a time (with the next one's answer arriving), not the whole queue.
    assert peak < 2 * batch + bodies / 4, f"{peak} bytes; a batch {batch}, bodies {bodies}"
    assert await queue.approximate_count() == entries  # looked at, none taken


async def test_a_pass_stops_at_its_limit_and_says_it_is_incomplete(backend: Backend) -> None:
    queue, endpoint = await filled(backend.account, 100)

    page = await parked_page(queue, endpoint, limit=64)

    assert not page.complete
    assert len(page.entries) == 64
    # No wait for the holds to run out: the pass made the 64 it hid visible again as it
    # ended, so the next pass lists all of them at once.
    whole = await parked_page(queue, endpoint, limit=100)
    assert whole.complete
    assert len(whole.entries) == 100


async def test_a_pass_whose_first_batch_shows_again_goes_on_to_the_end_of_the_queue() -> None:
    """The first batch the pass hid becomes visible again (its hold ran out) before the pass
    asks for the next: the queue hands it out first, the rest waits behind it."""
    clock = ManualClock()
    receives = 0

    async def hold_runs_out(operation: Operation) -> None:
        nonlocal receives
        if operation.kind == "queue.receive":
            receives += 1
            if receives == 2:
                clock.advance(LOOK_SECONDS + 1)

    account = InstrumentedAccount(
        MemoryStorageAccount(clock=clock), Instrumentation(on_operation=hold_runs_out)
    )
    entries = 3 * PEEK_LIMIT
    queue, endpoint = await filled(account, entries)

    page = await parked_page(queue, endpoint, limit=1000)

    assert page.complete
    assert sorted(e["message_id"] for e in page.entries) == sorted(f"m-{i}" for i in range(entries))
