"""Provisioning a measurement's resources and enqueueing its root messages.

Roots are enqueued before the drain starts, the way a backlog builds up in front of a
queue-triggered function; their cost is counted separately (``ingress_ops_per_root``), since
how a message enters the system is not what the modes differ in.
"""

from __future__ import annotations

import asyncio

from lab.bench.modes import as_mode
from lab.bench.workload import Names, build_app, plain_body, root
from shared.bus import Bus, BusConfig
from shared.bus.app import Store
from shared.provisioning import provision
from shared.resources import Resources
from shared.stores.account import StorageAccount
from shared.stores.instrumented import Instrumentation, InstrumentedAccount

SEED_CONCURRENCY = 16


async def provision_run(raw: StorageAccount, names: Names, store: Store = "table") -> None:
    """The round's queues, containers and tables, and the rows containers of blob endpoints
    (a Cosmos DB endpoint's container is its database's: ``lab.bench.stores``)."""
    await provision(
        raw,
        Resources(
            containers={"tokens": names.tokens, "topics": names.topics},
            tables={"ingress": names.ingress},
            endpoints=names.endpoints,
            blob_endpoints=names.endpoints if store == "blob" else (),
        ),
    )


async def seed(
    raw: StorageAccount,
    names: Names,
    bus_mode: str | None,
    config: BusConfig,
    roots: int,
    partitions: int,
) -> int:
    """Enqueue ``roots`` messages for the sender endpoint; returns the storage operations
    that took."""
    instrumentation = Instrumentation()
    account = InstrumentedAccount(raw, instrumentation)
    gate = asyncio.Semaphore(SEED_CONCURRENCY)

    if bus_mode is None:
        queue = account.queue(names.sender)

        async def enqueue(index: int) -> None:
            async with gate:
                await queue.send(plain_body(root(index, partitions)))

    else:
        client = Bus(build_app(names, as_mode(bus_mode)), account, config).client("bench")

        async def enqueue(index: int) -> None:
            async with gate:
                await client.send(
                    root(index, partitions), to=names.sender, idempotency_key=f"root{index}"
                )

    await asyncio.gather(*(enqueue(i) for i in range(roots)))
    return instrumentation.count
