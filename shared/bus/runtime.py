"""A running bus: one storage account, the app's endpoints, receivers and an ingress client."""

from __future__ import annotations

from typing import Any

from shared.bus.app import BusApp, Endpoint
from shared.bus.config import BusConfig
from shared.bus.ingress import IngressClient
from shared.bus.receiver import Outcome, Receiver
from shared.bus.topics import RecipientLists
from shared.stores.account import StorageAccount


class Bus:
    def __init__(
        self, app: BusApp, account: StorageAccount, config: BusConfig | None = None
    ) -> None:
        self.app = app
        self.account = account
        self.config = config or BusConfig()
        self.topics = RecipientLists(
            account.blob_container(self.config.topics_container),
            self.config.clock,
            self.config.topic_cache_seconds,
        )
        self._receivers: dict[str, Receiver] = {}

    def receiver(self, endpoint: str) -> Receiver:
        receiver = self._receivers.get(endpoint)
        if receiver is None:
            receiver = Receiver(self.app.get(endpoint), self.account, self.topics, self.config)
            self._receivers[endpoint] = receiver
        return receiver

    async def receive(self, endpoint: str, raw: str, dequeue_count: int = 1) -> Outcome:
        """Entry point of a queue-triggered function."""
        return await self.receiver(endpoint).receive(raw, dequeue_count)

    def client(self, sender: str = "ingress") -> IngressClient:
        return IngressClient(self.account, self.topics, self.config, sender)

    async def subscribe_all(self) -> list[tuple[str, str]]:
        """Subscribe every endpoint to the topics of the events it handles (idempotent)."""
        done = []
        endpoint: Endpoint[Any]
        for endpoint in self.app.endpoints.values():
            for topic in endpoint.topics:
                await self.topics.subscribe(topic, endpoint.name)
                done.append((topic, endpoint.name))
        return done
