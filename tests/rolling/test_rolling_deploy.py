"""A rolling deploy on one Azurite (issue 29): host A runs version 1 of an app, host B version
2 (``tests/rolling/app_v1.py``, ``app_v2.py``: a new optional field, a renamed command with
its former name, an event read from its previous shape by an upcaster, a field removed), both
serving the same queues. Orders flow through both hosts' HTTP ingress while A is stopped with
SIGTERM and replaced by a second host of version 2.

Where it matters which version reads a message, the test decides it rather than leaving it to
chance: what version 2 sends before B starts can only reach A (so A must read a body with a
field it does not know, and give back the renamed command and the newer event, which B then
processes); what a version 1 sender sends after A stopped can only reach version 2 (the
former name, the old event shape, the removed field). Then: nothing parked, nothing lost,
nothing processed twice, the audit passes, and the order version 1 parked is processed once
by version 2 after ``bus replay``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lab.host.process import HostProcess
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite
from tests.rolling import app_v1, app_v2
from tests.rolling.fleet import ENDPOINTS, V1, V2, Fleet, until

pytestmark = pytest.mark.azurite

ORDERS = 24
"""Orders sent while the hosts are replaced; every third one by a client of version 2."""
STOP_AFTER = 12
"""Orders sent before host A is stopped."""
PACE = 0.3
"""Seconds between two orders."""
GIVEN_BACK = "outcome=given_back"
PARKED = "outcome=poisoned"


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    """An emulator of its own (the app's endpoint names are fixed), provisioned."""
    for azurite in started_azurite():
        settings = StorageSettings(azurite.connection_string)
        async with AzureStorageAccount(settings) as account:
            fleet = Fleet(azurite, tmp_path, account)
            await fleet.provision()
            try:
                yield fleet
            finally:
                fleet.kill_all()


async def test_a_rolling_deploy_parks_loses_and_repeats_nothing(fleet: Fleet) -> None:
    # Given version 1 alone: it parks an order over its limit, and reads or gives back
    # what a sender of version 2 sends
    a = await fleet.start("a", V1)
    refused = await an_order_version_1_refuses(fleet, a)
    await version_2_senders_reach_version_1(fleet)

    # When version 2 joins and replaces version 1 while orders keep coming, and the order
    # version 1 parked is replayed
    traffic = await orders_while_version_1_is_replaced(fleet, a)
    replayed = await asyncio.to_thread(
        fleet.run, "shared.cli", "--no-progress", "replay", "orders", "--id", refused
    )
    assert replayed.returncode == 0, replayed.stderr[-2000:]

    # Then every message sent was processed once (counted once nothing waits any more), by
    # the version the test chose where it chose
    await until("every message is processed", lambda: all_handled(fleet, traffic))
    await until("the queues are empty", lambda: drained(fleet))
    handled = await until("the states are read", lambda: all_handled(fleet, traffic))
    assert {e: {o: s["count"] for o, s in handled[e].items()} for e in ENDPOINTS} == {
        e: dict.fromkeys(expected(traffic)[e], 1) for e in ENDPOINTS
    }
    assert handled["orders"]["wrapped"]["by"] == "v1"  # read, its new field ignored
    assert handled["orders"]["too-big"]["by"] == "v2"  # parked by v1, replayed
    for endpoint, order in READ_BY_VERSION_2:
        assert handled[endpoint][order]["by"] == "v2", (endpoint, order)
    assert handled["ledger"]["upcast"]["total_cents"] == 4200  # amount_cents, upcast
    assert handled["ledger"]["booked"]["total_cents"] == 700

    # And nothing is parked (the order version 1 refused was replayed), and only version 1
    # gave messages back
    for endpoint in ENDPOINTS:
        assert await fleet.parked(endpoint) == [], endpoint
    assert await fleet.stop("b") == await fleet.stop("b2") == 0
    assert len(fleet.lines("a", GIVEN_BACK)) >= 2
    assert fleet.lines("b", GIVEN_BACK) == fleet.lines("b2", GIVEN_BACK) == []
    [parked] = [line for host in ("a", "b", "b2") for line in fleet.lines(host, PARKED)]
    assert refused in parked

    # And the audit finds every delivery sent processed once
    summary = await audit(fleet)
    assert summary["verdict"] == "PASS", summary
    deliveries = sum(len(orders) for orders in expected(traffic).values())
    assert summary["sent"] == summary["processed"] == deliveries
    assert summary["invariants"]["duplicates"] == summary["invariants"]["lost"] == 0


READ_BY_VERSION_2 = [
    ("stock", "held"),  # given back by version 1
    ("ledger", "booked"),  # given back by version 1
    ("stock", "renamed"),
    ("shipping", "unrequired"),
    ("ledger", "upcast"),
]
"""(endpoint, order) of the messages only version 2 may have processed."""


async def orders_while_version_1_is_replaced(fleet: Fleet, a: HostProcess) -> Traffic:
    """Host B (version 2) started; orders sent to A and B; A stopped with SIGTERM once some
    were sent, then version 1 senders reach B, and B2 (version 2) starts; the orders sent."""
    b = await fleet.start("b", V2)
    live = [(a, V1), (b, V2)]
    traffic = Traffic(fleet, live)
    sending = asyncio.create_task(traffic.run())

    async def stop_point() -> bool:
        return len(traffic.sent) >= STOP_AFTER or sending.done()

    await until("orders are sent to both versions", stop_point)
    if sending.done():
        await sending  # it failed: say why
    live.remove((a, V1))  # as a load balancer drains an instance before stopping it
    assert await fleet.stop("a") == 0
    await version_1_senders_reach_version_2(fleet, b)
    b2 = await fleet.start("b2", V2)
    live.append((b2, V2))
    await sending
    return traffic


async def an_order_version_1_refuses(fleet: Fleet, a: HostProcess) -> str:
    """An order over version 1's limit, parked by A (DoNotRetry); its message id."""
    request = {"type": "PlaceOrder", "body": {"order_id": "too-big", "amount_cents": 250_000}}
    status, answer = await fleet.post(a, request, "too-big")
    assert status == 202, answer
    [message_id] = answer["message_ids"]
    [wrapper] = await until("version 1 parks the order", lambda: fleet.parked("orders"))
    assert wrapper["poison"]["error_type"] == "DoNotRetry"
    return str(message_id)


async def version_2_senders_reach_version_1(fleet: Fleet) -> None:
    """What a sender of version 2 sends while only A runs: an order with the new field is
    read; the renamed command and the event at version 2 are given back, not parked."""
    client = fleet.client(V2)
    wrapped = app_v2.PlaceOrder(order_id="wrapped", amount_cents=500, gift_wrap=True)
    await client.send(wrapped, to="orders", idempotency_key="wrapped")
    held = app_v2.HoldStock(order_id="held", quantity=1)
    await client.send(held, to="stock", idempotency_key="held")
    booked = app_v2.OrderPlaced(order_id="booked", total_cents=700, currency="EUR")
    await client.publish(booked, idempotency_key="booked")

    placed = await until("version 1 reads the order", lambda: fleet.state("orders", "wrapped"))
    assert placed["by"] == "v1"

    async def given_back_twice() -> bool:
        return len(fleet.lines("a", GIVEN_BACK)) >= 2

    await until("version 1 gives back what it cannot read", given_back_twice)
    assert await fleet.state("stock", "held") is None
    assert await fleet.state("ledger", "booked") is None


async def version_1_senders_reach_version_2(fleet: Fleet, b: HostProcess) -> None:
    """Once A has stopped: clients of version 1 through B's ingress (the former name, the
    removed field) and a sender of version 1 in process (another app not yet upgraded,
    publishing the event's old shape)."""
    renamed = {"order_id": "renamed", "quantity": 1}
    status, answer = await fleet.post(
        b, {"type": "ReserveStock", "to": "stock", "body": renamed}, "renamed"
    )
    assert status == 202, answer
    unrequired = {"order_id": "unrequired", "priority": "express"}
    status, answer = await fleet.post(
        b, {"type": "ShipOrder", "to": "shipping", "body": unrequired}, "unrequired"
    )
    assert status == 202, answer
    old = app_v1.OrderPlaced(order_id="upcast", amount_cents=4200)
    await fleet.client(V1).publish(old, idempotency_key="upcast")


class Traffic:
    """Orders through the HTTP ingress of the hosts in ``live``, one every ``PACE`` seconds:
    every third from a client of version 2 (with ``gift_wrap``, to a host of version 2),
    the others from clients of version 1 (to any host)."""

    def __init__(self, fleet: Fleet, live: list[tuple[HostProcess, str]]) -> None:
        self.fleet = fleet
        self.live = live
        self.sent: list[str] = []

    async def run(self) -> None:
        for i in range(ORDERS):
            order = f"order-{i:02d}"
            body: dict[str, object] = {"order_id": order, "amount_cents": 1000 + i}
            hosts = [host for host, app in self.live if app == V2 or i % 3]
            if i % 3 == 0:
                body["gift_wrap"] = True
            request = {"type": "PlaceOrder", "body": body}
            status, answer = await self.fleet.post(hosts[i % len(hosts)], request, order)
            assert status == 202, answer
            self.sent.append(order)
            await asyncio.sleep(PACE)


def expected(traffic: Traffic) -> dict[str, list[str]]:
    """Per endpoint, the orders it must have processed one message of."""
    orders = [*traffic.sent, "wrapped", "too-big"]
    return {
        "orders": orders,
        "stock": [*orders, "held", "renamed"],
        "shipping": [*orders, "unrequired"],
        "ledger": [*orders, "booked", "upcast"],
    }


async def all_handled(
    fleet: Fleet, traffic: Traffic
) -> dict[str, dict[str, dict[str, Any]]] | None:
    """Every endpoint's state of every order it must process, once all exist (None before)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for endpoint, orders in expected(traffic).items():
        found[endpoint] = {}
        for order in orders:
            state = await fleet.state(endpoint, order)
            if state is None:
                return None
            found[endpoint][order] = state
    return found


async def drained(fleet: Fleet) -> bool:
    return all([await fleet.depth(endpoint) == 0 for endpoint in ENDPOINTS])


async def audit(fleet: Fleet) -> dict[str, Any]:
    """``python -m shared.audit run`` on the account, as an operator runs it; its summary."""
    out = fleet.folder / "audit"
    done = await asyncio.to_thread(fleet.run, "shared.audit", "run", "--quiet", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary
