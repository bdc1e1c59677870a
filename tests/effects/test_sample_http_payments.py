"""The sample's charge as the product performs it: through ``HttpProvider`` over the network to
the local payment provider in a process of its own (``python -m lab.provider``), whose first
answer is a 503 and whose second is a connection dropped after the charge was applied; its
ledger, read over HTTP, shows the charge once, under the key the sample recorded."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import aiohttp
import pytest

from lab.local.payments import Provider
from lab.provider.process import provider_process
from shared.effects.addresses import Credential, ServiceAddress
from shared.effects.http import HttpClient, HttpProvider
from shared.sample.app import Payment, PlaceOrder, Shipping, build_app
from shared.sample.charges import PROVIDER
from tests.effects.sample import sample_harness

ANSWER_MAX_BYTES = 65536


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """A provider of this module's own: the faults it is told to inject hit no other test."""
    credential = secrets.token_urlsafe(24)
    workdir = tmp_path_factory.mktemp("provider")
    with provider_process(workdir, credential=credential) as url:
        yield Provider(url, credential)


async def set_faults(provider: Provider, faults: dict[str, object]) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{provider.url}/control/faults", json=faults, headers=provider.headers()
        ) as response,
    ):
        assert response.status == 200, await response.text()


async def test_a_charge_through_a_503_and_a_dropped_connection_is_in_the_ledger_once(
    provider: Provider,
) -> None:
    await set_faults(provider, {"unavailable": {"count": 1}, "drop": {"count": 1}})
    client = HttpClient()
    address = ServiceAddress(provider.url, Credential(provider.credential))
    declared = build_app().services[PROVIDER]
    http = HttpProvider(declared, address, client, max_bytes=ANSWER_MAX_BYTES)
    harness = await sample_harness(http)
    try:
        order = PlaceOrder(order_id="net-1", customer="ada", amount_cents=1500)
        await harness.setup_bus.client().send(order, to="orders", idempotency_key="net-1")
        await harness.run_until_quiet()
    finally:
        await client.close()

    async with aiohttp.ClientSession() as session:
        ledger = await provider.ledger(session)
    payment = await harness.applied_state("payments", "net-1", Payment)
    [charge] = [e for e in ledger.entries if e.order == "net-1"]
    assert (charge.kind, charge.amount, charge.key) == ("charge", 1500, payment.charge_key)
    assert (payment.status, payment.amount_cents, payment.payment_id) == (
        "charged",
        1500,
        charge.id,
    )
    assert (await harness.applied_state("shipping", "net-1", Shipping)).shipment_id
    assert (ledger.faults["unavailable"], ledger.faults["drop"]) == (1, 1)
