"""The payment provider as the demo runs it (``python -m lab.provider``, its faults on) and
reaches it: the host through its app settings, the customers who pay later directly, and the
verdict through its ledger."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from lab.provider.book import Ledger
from shared.effects.addresses import credential_setting, url_setting
from shared.sample.charges import PROVIDER

CURRENCY = "eur"
CUSTOMER_CALL_SECONDS = 2.0
"""How long a customer paying at the provider waits for an answer before trying again."""


def provider_args(rate: float, late_seconds: float, seed: int) -> list[str]:
    """The provider's fault switches: each fault on ``rate`` of the calls, seeded."""
    args = ["--seed", str(seed), "--late-seconds", str(late_seconds)]
    for fault in ("late", "unavailable", "drop"):
        args += [f"--{fault}-rate", str(rate)]
    return args


@dataclass(frozen=True)
class Provider:
    """The local payment provider the host calls, as the demo's customers reach it too."""

    url: str
    credential: str

    def app_settings(self) -> dict[str, str]:
        """The sample's settings that point its service ``provider`` here."""
        return {url_setting(PROVIDER): self.url, credential_setting(PROVIDER): self.credential}

    def headers(self, key: str | None = None) -> dict[str, str]:
        given = {"Authorization": f"Bearer {self.credential}"}
        return given if key is None else {**given, "Idempotency-Key": key}

    async def ledger(self, session: aiohttp.ClientSession) -> Ledger:
        async with session.get(f"{self.url}/ledger", headers=self.headers()) as response:
            response.raise_for_status()
            return Ledger.model_validate_json(await response.read())


async def pay_at_provider(
    session: aiohttp.ClientSession, provider: Provider, body: dict[str, Any], deadline: float
) -> None:
    """A customer pays for a pay-later order at the provider, under a key of their own
    repeated until an answer comes back (the provider's faults hit them too); ``body``, the
    PaymentReceived to report, gets the provider's charge id as its ``payment_id``."""
    charge = {"order": body["order_id"], "amount": body["amount_cents"], "currency": CURRENCY}
    timeout = aiohttp.ClientTimeout(total=CUSTOMER_CALL_SECONDS)
    while time.monotonic() < deadline:
        try:
            async with session.post(
                f"{provider.url}/v1/charges",
                json=charge,
                headers=provider.headers(f"customer-{body['order_id']}"),
                timeout=timeout,
            ) as response:
                if response.status == 200:
                    body["payment_id"] = str((await response.json())["id"])
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{body['order_id']}: the provider took no payment before the deadline")
