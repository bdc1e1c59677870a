"""Parked messages for the console's tests, made as the poison tests make them: wrappers
written to a poison queue as the bus writes them, and a real message sent with ``bus send``
whose signal is parked beside a reason, its token kept (so its body is read from the token)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from lab.local.azurite import AzuriteEndpoints
from shared.bus.poison import Reason, poison_body
from shared.resources import CONTAINERS, poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.console.running import console_environ

TYPES = ("ChargePayment", "RefundPayment")
ERRORS = ("KeyError", "TimeoutError", "ValueError", "RuntimeError", "OSError")


def account(emulator: AzuriteEndpoints) -> AzureStorageAccount:
    return AzureStorageAccount(StorageSettings(emulator.connection_string))


def parked_content(i: int, endpoint: str = "payments", reason: str | None = None) -> str:
    """The i-th of a set of parked messages: types and errors in turn."""
    signal = json.dumps({"message_id": f"m-{i}", "envelope": json.dumps({"id": f"m-{i}"})})
    why = Reason(
        endpoint,
        reason or f"failure {i}",
        5,
        error_type=ERRORS[i % len(ERRORS)],
        message_id=f"m-{i}",
        message_type=TYPES[i % len(TYPES)],
    )
    return poison_body(signal, why)


def park(emulator: AzuriteEndpoints, contents: list[str], endpoint: str = "payments") -> None:
    async def send_all() -> None:
        async with account(emulator) as storage:
            poison = storage.queue(poison_queue(endpoint))
            for start in range(0, len(contents), 50):
                await asyncio.gather(*(poison.send(c) for c in contents[start : start + 50]))

    asyncio.run(send_all())


def clear(emulator: AzuriteEndpoints, *endpoints: str) -> None:
    async def empty() -> None:
        async with account(emulator) as storage:
            for endpoint in endpoints:
                await storage.queue(poison_queue(endpoint)).clear()
                await storage.queue(endpoint).clear()

    asyncio.run(empty())


def waiting(emulator: AzuriteEndpoints, queue: str) -> int:
    async def count() -> int:
        async with account(emulator) as storage:
            return await storage.queue(queue).approximate_count()

    return asyncio.run(count())


def archived(emulator: AzuriteEndpoints) -> list[dict[str, object]]:
    """Every entry of the discard archive."""

    async def read() -> list[dict[str, object]]:
        async with account(emulator) as storage:
            container = storage.blob_container(CONTAINERS["discarded"])
            return [
                json.loads((await container.read(blob.name)).data)
                async for blob in container.list()
            ]

    return asyncio.run(read())


def park_sent_order(
    emulator: AzuriteEndpoints, folder: Path, key: str, customer: str, reason: str
) -> str:
    """``bus send PlaceOrder`` to orders, its signal taken from the queue and parked with
    ``reason`` (as the pipeline parks a message whose handler failed): its message id."""
    body = json.dumps({"order_id": key, "customer": customer, "amount_cents": 1250})
    command = ("send", "PlaceOrder", "--to", "orders", "--key", key, "--body", body)
    sent = subprocess.run(
        [sys.executable, "-m", "shared.cli", *command],
        cwd=folder,
        env=console_environ(emulator.connection_string),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    [message_id] = json.loads(sent.stdout)["message_ids"]

    async def move() -> None:
        async with account(emulator) as storage:
            queue = storage.queue("orders")
            [signal] = await queue.receive(1, visibility_timeout=30)
            why = Reason(
                "orders",
                reason,
                5,
                error_type="ValueError",
                message_id=message_id,
                message_type="PlaceOrder",
            )
            await storage.queue(poison_queue("orders")).send(poison_body(signal.content, why))
            await queue.delete(signal.id, signal.pop_receipt)

    asyncio.run(move())
    return str(message_id)
