"""The sample app's bus on a test's account: provisioning, processing every queued message
the way the Functions host would, and reading what the endpoints applied."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from shared.bus import Bus
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.runtime import bus_config
from shared.sample.app import app as sample_app
from shared.stores.account import StorageAccount
from shared.stores.queue import MessageQueue, QueueMessage
from tests.conftest import sample_resources


def sample_bus(account: StorageAccount) -> Bus:
    return Bus(sample_app, account, bus_config())


async def provision_sample(account: StorageAccount) -> None:
    await provision(account, sample_resources())
    await sample_bus(account).subscribe_all()


async def process_all(account: StorageAccount) -> Counter[str]:
    """Deliver every queued message of every endpoint, a batch at a time, until all queues
    are empty; the outcome of each delivery, counted."""
    bus = sample_bus(account)
    outcomes: Counter[str] = Counter()
    busy = True
    while busy:
        busy = False
        for endpoint in sample_app.endpoints:
            queue = account.queue(endpoint)
            batch = await queue.receive(32, visibility_timeout=60)
            busy |= bool(batch)
            done = await asyncio.gather(*(_deliver(bus, endpoint, queue, m) for m in batch))
            outcomes.update(done)
    return outcomes


async def _deliver(bus: Bus, endpoint: str, queue: MessageQueue, message: QueueMessage) -> str:
    outcome = await bus.receive(endpoint, message.content, message.dequeue_count)
    await queue.delete(message.id, message.pop_receipt)
    return outcome.value


async def states(account: StorageAccount, endpoint: str) -> dict[str, dict[str, Any]]:
    """The state of every partition of ``endpoint``, by partition key."""
    rows = sample_bus(account).endpoint_state(endpoint)
    return {row.partition_key: json.loads(row.data) async for row in rows.states()}


async def queue_depths(account: StorageAccount) -> dict[str, int]:
    depths = {}
    for endpoint in sample_app.endpoints:
        for name in (endpoint, poison_queue(endpoint)):
            depths[name] = await account.queue(name).approximate_count()
    return depths
