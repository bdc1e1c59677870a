"""A demo customer paying at the local provider while its faults hit: one charge under the
customer's key, whose id the reported payment carries; the ledger read over HTTP with the
credential."""

from __future__ import annotations

import time

import aiohttp

from lab.local.payments import Provider, pay_at_provider
from lab.provider.faults import FaultSettings, Switch
from lab.provider.server import PaymentProvider, serving

CREDENTIAL = "demo-credential"


async def test_a_customer_pays_once_through_a_503_a_dropped_connection_and_a_late_answer() -> None:
    faults = FaultSettings(
        unavailable=Switch(count=1), drop=Switch(count=1), late=Switch(count=1), late_seconds=5.0
    )
    books = PaymentProvider(credential=CREDENTIAL, faults=faults)
    async with serving(books) as url, aiohttp.ClientSession() as session:
        provider = Provider(url, CREDENTIAL)
        payment = {"order_id": "later1", "payment_id": "unknown", "amount_cents": 700}

        await pay_at_provider(session, provider, payment, time.monotonic() + 60)

        ledger = await provider.ledger(session)
    [entry] = ledger.entries
    assert (entry.kind, entry.key, entry.order, entry.amount) == (
        "charge",
        "customer-later1",
        "later1",
        700,
    )
    assert payment["payment_id"] == entry.id
    assert ledger.faults == {"unavailable": 1, "drop": 1, "late": 1}
