"""Real orders through the bus for the audit tests."""

from __future__ import annotations

from shared.bus.app import Mode
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name

ORDERS = 3
DELIVERIES_PER_ORDER = 5  # PlaceOrder, ChargeCard, OrderPlaced x2 (loyalty, shipping), ShipOrder


async def run_orders(backend: Backend, mode: Mode = "token") -> tuple[Harness, FlowNames]:
    """Three orders through the four-endpoint flow, every endpoint in ``mode``, with one
    signal delivered twice."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, mode=mode))
    client = harness.setup_bus.client()
    for i in range(ORDERS):
        await client.send(
            PlaceOrder(order_id=f"o{i}", amount=10), to=names.orders, idempotency_key=f"o{i}"
        )
    [signal, *_] = await harness.raw.queue(names.orders).peek()
    await harness.raw.queue(names.orders).send(signal.content)
    await harness.run_until_quiet()
    return harness, names
