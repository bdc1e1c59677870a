"""The overview's figures from what storage holds, on in-memory stores: throughput and
latency from audit rows (the window, a scan that stops at its limit), and tokens by sender
(the oldest due one's age, delayed ones and the soonest due)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.bus.outgoing import DUE_METADATA
from shared.bus.records import AUDIT_PREFIX
from shared.bus.state.rows import TableRows
from shared.cleanup.backlog import NEXT_DUE, tokens_in_flight
from shared.console.throughput import WINDOW_MINUTES, throughput
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity, TableValue

NOW = datetime(2026, 11, 23, 15, 30, 20, tzinfo=UTC)
UUID = "00000000-0000-4000-8000-{:012d}"


async def audit_rows(account: MemoryStorageAccount, ages: list[tuple[float, float]]) -> None:
    """One audit row per (seconds before NOW it was processed, milliseconds it took)."""
    table = account.table("orders")
    await table.create_if_missing()
    for i, (age, took_ms) in enumerate(ages):
        processed = NOW - timedelta(seconds=age)
        sent = processed - timedelta(milliseconds=took_ms)
        properties: dict[str, TableValue] = {
            "processed_at": processed,
            "sent_at": sent,
            "endpoint": "orders",
        }
        await table.insert(Entity(f"p{i}", f"{AUDIT_PREFIX}m{i}", properties))
    await table.insert(Entity("p0", "state", {"x": 1}))  # not an audit row


async def test_throughput_counts_the_last_minutes_and_latency_their_percentiles() -> None:
    account = MemoryStorageAccount()
    recent = [(5, 100), (10, 300), (65, 200), (70, 400)]  # this minute: 2, the one before: 2
    await audit_rows(account, [*recent, (WINDOW_MINUTES * 60 + 30, 9999)])  # one too old

    done = await throughput(TableRows(account.table("orders")), NOW, scan_limit=1000)

    assert len(done.per_minute) == WINDOW_MINUTES
    assert done.per_minute[-1] == (datetime(2026, 11, 23, 15, 30, tzinfo=UTC), 2)
    assert done.per_minute[-2] == (datetime(2026, 11, 23, 15, 29, tzinfo=UTC), 2)
    assert sum(count for _, count in done.per_minute) == 4
    assert done.p50_ms == 250.0
    assert done.p95_ms is not None
    assert 370 <= done.p95_ms <= 400
    assert (done.scanned, done.complete) == (5, True)


async def test_a_scan_that_stops_at_its_limit_says_its_figures_are_partial() -> None:
    account = MemoryStorageAccount()
    await audit_rows(account, [(i, 10) for i in range(150)])

    done = await throughput(TableRows(account.table("orders")), NOW, scan_limit=100)

    assert (done.scanned, done.complete) == (100, False)
    assert sum(count for _, count in done.per_minute) == 100


async def test_tokens_are_counted_by_sender_with_the_oldest_due_and_the_soonest_delayed() -> None:
    account = MemoryStorageAccount()
    tokens = account.blob_container("tokens")
    await tokens.create_if_missing()
    names = [
        f"orders/{UUID.format(i)}/{UUID.format(100 + i)}/{UUID.format(200 + i)}" for i in range(9)
    ]
    for i, name in enumerate(names):
        due = {} if i < 2 else {DUE_METADATA: (NOW + timedelta(hours=i)).isoformat()}
        await tokens.create(name, b"{}", {"claim": "", **due})
    await tokens.create(f"cli/{UUID.format(50)}/{UUID.format(51)}/{UUID.format(52)}", b"{}", {})

    senders = (await tokens_in_flight(tokens, NOW + timedelta(seconds=1))).senders

    orders = senders["orders"]
    assert (orders.count, orders.delayed) == (9, 7)
    assert orders.oldest is not None  # the two that are not delayed
    soonest = orders.next_due()
    assert len(soonest) == NEXT_DUE
    assert [d.due_at for d in soonest] == [NOW + timedelta(hours=h) for h in range(2, 7)]
    assert soonest[0].message_id == UUID.format(202)
    assert (senders["cli"].count, senders["cli"].delayed) == (1, 0)
