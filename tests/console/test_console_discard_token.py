"""A discard takes the parked message's token with it, its envelope kept in the archive entry
first: the backlog's tokens in flight and the oldest token's age clear. A poison message that
names a token which is not its own (a live message's signal copied into another endpoint's
poison queue) leaves that token where it is."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus.envelope import Signal
from shared.bus.poison import Reason, poison_body
from shared.cleanup.backlog import tokens_in_flight
from shared.resources import CONTAINERS, poison_queue
from tests.console.parking import account, archived, clear, park_sent_order
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite


@pytest.fixture
def emptied(emulator: AzuriteEndpoints, console: RunningConsole) -> RunningConsole:
    clear(emulator, "payments", "orders")
    return console


def tokens_of(emulator: AzuriteEndpoints, message_id: str) -> list[str]:
    async def names() -> list[str]:
        async with account(emulator) as storage:
            tokens = storage.blob_container(CONTAINERS["tokens"])
            return [blob.name async for blob in tokens.list() if message_id in blob.name]

    return asyncio.run(names())


def cli_tokens_in_flight(emulator: AzuriteEndpoints) -> tuple[int, float]:
    """The backlog's figures for the sender ``cli`` (``bus send``): as the alerts read them."""

    async def tally() -> tuple[int, float]:
        async with account(emulator) as storage:
            now = datetime.now(UTC)
            tokens = storage.blob_container(CONTAINERS["tokens"])
            found = (await tokens_in_flight(tokens, now)).senders.get("cli")
            return (0, 0.0) if found is None else (found.count, found.age_seconds(now))

    return asyncio.run(tally())


def listed_id(console: RunningConsole, endpoint: str) -> str:
    [listed] = console.get(f"/api/failed?endpoint={endpoint}").json()["messages"]
    return str(listed["id"])


def test_a_discard_removes_the_token_and_archives_its_envelope_and_the_backlog_clears(
    emptied: RunningConsole, emulator: AzuriteEndpoints, project: Path
) -> None:
    before, _ = cli_tokens_in_flight(emulator)
    message_id = park_sent_order(emulator, project, "order-d1", "ada", "handler failed")
    assert len(tokens_of(emulator, message_id)) == 1  # parked before its claim: token kept
    assert cli_tokens_in_flight(emulator)[0] == before + 1

    done = emptied.post(
        "/api/discard",
        {"endpoint": "orders", "ids": [listed_id(emptied, "orders")], "reason": "refunded"},
    )

    assert done.status == 200, done.body
    assert done.json()["discarded"] == 1
    assert tokens_of(emulator, message_id) == []
    assert cli_tokens_in_flight(emulator)[0] == before
    [entry] = [e for e in archived(emulator) if e["reason"] == "refunded"]
    envelope = json.loads(str(entry["envelope"]))
    assert envelope["id"] == message_id
    assert envelope["body"]["order_id"] == "order-d1"


def test_a_signal_copied_into_another_poison_queue_does_not_take_the_token_it_names(
    emptied: RunningConsole, emulator: AzuriteEndpoints, project: Path
) -> None:
    message_id = park_sent_order(emulator, project, "order-d2", "bob", "handler failed")
    [token] = tokens_of(emulator, message_id)

    async def copy_into_payments() -> None:
        async with account(emulator) as storage:
            [parked] = await storage.queue(poison_queue("orders")).peek(1)
            signal = json.loads(parked.content)["signal"]
            assert Signal.parse(signal).token == token
            why = Reason("payments", "forged", 5, message_id=message_id)
            await storage.queue(poison_queue("payments")).send(poison_body(signal, why))

    asyncio.run(copy_into_payments())
    done = emptied.post(
        "/api/discard",
        {"endpoint": "payments", "ids": [listed_id(emptied, "payments")], "reason": "forged"},
    )

    assert done.status == 200, done.body
    assert done.json()["discarded"] == 1
    assert tokens_of(emulator, message_id) == [token]  # addressed to orders: not payments' own
    [entry] = [e for e in archived(emulator) if e["reason"] == "forged"]
    assert entry["envelope"] is None
