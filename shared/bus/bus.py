"""A running bus: its storage accounts, the app's endpoints, receivers and an ingress client.

Two roles (``shared.resources``): the messaging account holds the queues, tokens, payloads,
topics, parked messages and ingress records; the state account each table endpoint's rows. A
single app passes one account for both and makes the same requests as before."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.bus.app import BusApp, Mode
from shared.bus.budget import BodyBudget, RequestGate
from shared.bus.config import BusConfig
from shared.bus.ingress import IngressClient
from shared.bus.modes.entity_outbox import EntityOutboxPipeline
from shared.bus.modes.processed_table import ProcessedMessagesPipeline
from shared.bus.modes.state_based import StateBasedPipeline
from shared.bus.pipeline import Outcome, Pipeline
from shared.bus.receiver import Receiver
from shared.bus.session import Session
from shared.bus.state.base import EndpointState
from shared.bus.state.stores import DocumentDatabase, SqlDatabase, endpoint_state
from shared.bus.subscriptions import handled_topics
from shared.bus.topics import RecipientLists
from shared.stores.account import StorageAccount

_PIPELINES: dict[Mode, type[Pipeline]] = {
    "token": Receiver,
    "state_based": StateBasedPipeline,
    "entity_outbox": EntityOutboxPipeline,
    "processed_messages": ProcessedMessagesPipeline,
}


class Bus:
    def __init__(
        self,
        app: BusApp,
        account: StorageAccount,
        config: BusConfig | None = None,
        *,
        sql: SqlDatabase | None = None,
        state: StorageAccount | None = None,
        cosmos: DocumentDatabase | None = None,
    ) -> None:
        self.app = app
        self.account = account
        """The messaging account."""
        self.state = account if state is None else state
        """Where table endpoints keep their rows (default: the messaging account)."""
        self.sql = sql
        """Where ``store="postgres"`` endpoints keep their rows (None: no such endpoint)."""
        self.cosmos = cosmos
        """Where ``store="cosmos"`` endpoints keep their documents (None: no such endpoint)."""
        self.config = config or BusConfig()
        self.topics = RecipientLists(
            account.blob_container(self.config.topics_container),
            self.config.clock,
            self.config.topic_cache_seconds,
        )
        self._receivers: dict[str, Pipeline] = {}
        self.budget = BodyBudget(self.config.body_budget)
        """The worker's body budget: every receiver's and the HTTP ingress's
        (``shared.bus.budget``)."""
        self.ingress_requests = RequestGate(self.config.http_concurrency)
        """The HTTP ingress requests in progress (``shared.http_ingress``)."""

    def receiver(self, endpoint: str) -> Pipeline:
        """The receive pipeline of ``endpoint``, of the kind its mode asks for (``Receiver``
        for token mode)."""
        receiver = self._receivers.get(endpoint)
        if receiver is None:
            declared = self.app.get(endpoint)
            kind = _PIPELINES[declared.mode]
            receiver = kind(
                declared,
                self.account,
                self.topics,
                self.config,
                state=self.endpoint_state(endpoint),
                budget=self.budget,
            )
            self._receivers[endpoint] = receiver
        return receiver

    def endpoint_state(self, endpoint: str) -> EndpointState:
        """Where ``endpoint`` keeps its state, O(m) and audit rows."""
        declared = self.app.get(endpoint)
        return endpoint_state(
            declared.name,
            declared.store,
            self.state,
            self.sql,
            self.cosmos,
            blob_max_bytes=self.config.max_payload_bytes,
        )

    async def receive(
        self,
        endpoint: str,
        raw: str,
        dequeue_count: int = 1,
        *,
        enqueued_at: datetime | None = None,
    ) -> Outcome:
        """Entry point of a queue-triggered function. ``enqueued_at``, the queue message's
        insertion time when the trigger gives it, is kept in a poison reason."""
        return await self.receiver(endpoint).receive(raw, dequeue_count, enqueued_at=enqueued_at)

    def client(
        self, sender: str = "ingress", *, scope: str | None = None, legacy: bool = True
    ) -> IngressClient:
        """An ingress client for ``sender``; ``scope`` (default: the sender) says whose
        idempotency keys it sends under, ``legacy`` whether the previous version's records
        may answer for it (``shared.bus.ingress``)."""
        return IngressClient(
            self.account,
            self.topics,
            self.config,
            sender,
            routes=self.app.routes,
            scope=scope,
            legacy=legacy,
        )

    def session(
        self,
        endpoint: str,
        *,
        partition: str,
        key: str | None = None,
        scope: str | None = None,
        connection: Any = None,
    ) -> Session:
        """A transactional session sending as ``endpoint`` (declared ``sessions=True``): the
        user's writes to ``partition`` of its store and the messages sent commit together
        (``shared.bus.session``). ``key``, the request's idempotency key, makes a retry of
        the request within the ingress window write and send nothing new; ``scope`` (default:
        the endpoint) says whose keys it is among, as the ingress's sender scopes do;
        ``connection``, on PostgreSQL, the user's own asyncpg connection to commit on."""
        declared = self.app.get(endpoint)
        return Session(
            declared,
            self.endpoint_state(endpoint).rows(),
            self.account,
            self.topics,
            self.config,
            partition=partition,
            key=key,
            scope=declared.name if scope is None else scope,
            connection=connection,
        )

    async def subscribe_all(self) -> list[tuple[str, str]]:
        """Subscribe every endpoint to the topics of the events it handles (idempotent)."""
        done = handled_topics(self.app)
        for topic, endpoint in done:
            await self.topics.subscribe(topic, endpoint)
        return done
