"""The overview reads no message body: five delayed messages of 2 MiB each, sent by the sample
app, are counted and listed as the next due (type and destination from their tokens'
metadata) without a single token downloaded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.console.overview import overview
from shared.provisioning import provision
from shared.runtime import Worker
from shared.sample.app import PlaceOrder
from shared.sample.app import app as sample_app
from shared.stores.instrumented import Instrumentation, InstrumentedAccount
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import sample_settings

LARGE = 2 * 1024 * 1024


async def test_the_overview_lists_large_delayed_messages_without_reading_one() -> None:
    memory = MemoryStorageAccount()
    settings = sample_settings()
    await provision(memory, Worker(sample_app, settings, memory).resources)
    sender = Worker(sample_app, settings, memory)
    for i in range(5):
        order = PlaceOrder(order_id=f"big-{i}", customer="x" * LARGE, amount_cents=1)
        await (
            sender.bus()
            .client("cli")
            .send(order, to="orders", idempotency_key=f"big-{i}", delay=timedelta(hours=1 + i))
        )
    watched = Instrumentation()
    looking = Worker(sample_app, settings, InstrumentedAccount(memory, watched))

    seen = await overview(looking, datetime.now(UTC), scan_limit=1000)

    [cli] = [s for s in seen["other_senders"] if s["sender"] == "cli"]
    assert (cli["tokens_in_flight"], cli["delayed_count"]) == (5, 5)
    assert [(d["type"], d["to"]) for d in cli["next_due"]] == [("PlaceOrder", "orders")] * 5
    reads = [op for op in watched.operations if op.kind == "blob.read"]
    assert [op.target for op in reads if op.target.startswith("tokens/")] == []
