"""The local provider's fault switches, each seen by a real client: a 503 before applying, a
connection dropped after applying, an answer held past the client's timeout; by count, by a
seeded rate, and set while it runs."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from lab.provider.faults import FaultSettings, Switch
from tests.provider.client import Client, charge, started

LATE_SECONDS = 3.0


async def test_unavailable_answers_503_before_applying(client: Client) -> None:
    await client.control({"unavailable": {"count": 1}})
    refused = await client.call("charge", charge(), "k1")
    assert refused.status == 503
    assert client.keys() == []
    retried = await client.call("charge", charge(), "k1")
    assert retried.status == 200
    assert client.keys() == ["k1"]
    assert client.provider.faults.injected["unavailable"] == 1


async def test_a_dropped_connection_applied_the_call_and_a_retry_gets_its_answer(
    client: Client,
) -> None:
    await client.control({"drop": {"count": 1}})
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.call("charge", charge(), "k1")
    assert client.keys() == ["k1"]  # applied, though the client saw no answer
    retried = await client.call("charge", charge(), "k1")
    assert retried.status == 200
    assert retried.body["key"] == "k1"
    assert client.keys() == ["k1"]


async def test_a_late_answer_is_applied_before_the_client_gives_up(client: Client) -> None:
    """While the answer is held the key is in progress: a retry is answered 409 and applies
    nothing (as at Stripe); once it is sent, a retry gets it."""
    await client.control({"late": {"count": 1}, "late_seconds": LATE_SECONDS})
    with pytest.raises(TimeoutError):
        await client.call("charge", charge(), "k1", within=0.3)
    assert client.keys() == ["k1"]
    in_progress = await client.call("charge", charge(), "k1")
    assert (in_progress.status, in_progress.body["error"]["code"]) == (409, "in_progress")
    await asyncio.sleep(LATE_SECONDS)  # the held answer's timer, set earlier, fires first
    assert "k1" not in client.provider.running
    retried = await client.call("charge", charge(), "k1", within=2.0)  # not late again
    assert (retried.status, client.keys()) == (200, ["k1"])
    assert (await client.get("/ledger")).body["faults"]["late"] == 1


async def fired(faults: FaultSettings, calls: int) -> list[int]:
    """The statuses ``calls`` first charges (each under its own key) get."""
    statuses = []
    async for running in started(faults):
        for n in range(calls):
            statuses.append((await running.call("charge", charge(order=f"o{n}"), f"k{n}")).status)
    return statuses


async def test_a_rate_with_a_seed_fires_on_that_share_and_repeats_with_the_seed() -> None:
    faults = FaultSettings(unavailable=Switch(rate=0.3), seed=11)
    first = await fired(faults, 60)
    again = await fired(faults, 60)
    assert first == again
    assert 8 <= first.count(503) <= 30
    assert set(first) == {200, 503}


async def test_a_count_fires_on_the_next_calls_only() -> None:
    statuses = await fired(FaultSettings(unavailable=Switch(count=2)), 4)
    assert statuses == [503, 503, 200, 200]


async def test_switches_set_while_running_replace_the_ones_in_force(client: Client) -> None:
    set_to = await client.control({"unavailable": {"count": 1}})
    assert set_to.status == 200
    assert (await client.call("charge", charge(), "k1")).status == 503
    await client.control({})  # everything off
    assert (await client.call("charge", charge(), "k1")).status == 200
