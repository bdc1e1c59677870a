"""The fan-out bench at a small size: every subscriber processes each publish once, and a
higher send concurrency shortens the hub's invocation under a per-request latency."""

from __future__ import annotations

from lab.bench.payload_fanout import memory_run


async def test_the_bench_publishes_to_every_subscriber_at_each_concurrency() -> None:
    one = await memory_run(40, 1, latency=0.005)
    many = await memory_run(40, 8, latency=0.005)

    assert (one.subscribers, one.concurrency, many.concurrency) == (40, 1, 8)
    assert one.hub_seconds <= one.all_seconds
    # 80 requests one after the other take at least 0.4 s; 8 at a time about a tenth of it.
    assert one.hub_seconds >= 0.4
    assert many.hub_seconds < one.hub_seconds / 2
    assert many.client_seconds < one.client_seconds / 2
