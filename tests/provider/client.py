"""A real HTTP client for the local provider's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from lab.provider.faults import FaultSettings
from lab.provider.server import PaymentProvider, serving

CREDENTIAL = "test-credential"
PATHS = {"charge": "/v1/charges", "refund": "/v1/refunds"}


@dataclass
class Answer:
    status: int
    body: Any


@dataclass
class Client:
    session: aiohttp.ClientSession
    url: str
    provider: PaymentProvider

    async def call(
        self,
        operation: str,
        body: object,
        key: str | None,
        *,
        credential: str | None = CREDENTIAL,
        within: float = 10.0,
    ) -> Answer:
        headers = {} if key is None else {"Idempotency-Key": key}
        if credential is not None:
            headers["Authorization"] = f"Bearer {credential}"
        data = body if isinstance(body, bytes) else None
        sent = None if isinstance(body, bytes) else body
        async with self.session.post(
            self.url + PATHS[operation],
            json=sent,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=within),
        ) as response:
            return Answer(response.status, await response.json())

    async def get(self, path: str, credential: str | None = CREDENTIAL) -> Answer:
        headers = {} if credential is None else {"Authorization": f"Bearer {credential}"}
        async with self.session.get(self.url + path, headers=headers) as response:
            return Answer(response.status, await response.json())

    async def control(self, settings: object) -> Answer:
        headers = {"Authorization": f"Bearer {CREDENTIAL}"}
        async with self.session.post(
            self.url + "/control/faults", json=settings, headers=headers
        ) as response:
            return Answer(response.status, await response.json())

    def keys(self) -> list[str]:
        return [entry.key for entry in self.provider.books.entries]


async def started(faults: FaultSettings | None = None) -> AsyncIterator[Client]:
    provider = PaymentProvider(credential=CREDENTIAL, faults=faults)
    async with serving(provider) as url, aiohttp.ClientSession() as session:
        yield Client(session, url, provider)


def charge(order: str = "o1", amount: int = 1200, **extra: object) -> dict[str, object]:
    return {"order": order, "amount": amount, "currency": "eur", **extra}
