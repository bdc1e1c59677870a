"""Drives a bus the way the Functions host would, with faults, for the pipeline tests."""

from __future__ import annotations

import contextlib
import json
import typing
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, replace

import pytest
from azure.cosmos.exceptions import CosmosResourceNotFoundError
from pydantic import BaseModel

from shared.bus import Bus, BusApp, BusConfig, Outcome
from shared.bus.app import Mode, Store
from shared.bus.envelope import TOKEN_NAME
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX, ProcessedRecord
from shared.bus.modes.state_based import INDEX_PREFIX, IndexEntry
from shared.bus.records import STATE_ROW, OutboxRecord, outbox_row
from shared.bus.saga import SAGA_ROW_TYPE, SagaRow
from shared.bus.state.base import EndpointState
from shared.bus.state.connection import PostgresSettings
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.bus.state.rows import EndpointRows
from shared.bus.state.stores import DocumentDatabase, PostgresDatabase, endpoints_rows
from shared.clock import ManualClock
from shared.errors import NotFound
from shared.host_json import QueueSettings
from shared.provisioning import provision
from shared.queue_trigger import QueueWorker
from shared.resources import poison_queue, resources_of
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.cosmos.database import CosmosDatabase
from shared.stores.instrumented import (
    Instrumentation,
    InstrumentedAccount,
    Operation,
    SimulatedCrash,
)
from shared.stores.instrumented_documents import InstrumentedDocumentDatabase
from shared.stores.memory import MemoryStorageAccount
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.queue import QueueMessage
from shared.stores.table import Entity
from tests.bus.flow import Ledger
from tests.conftest import Backend, unique_name
from tests.cosmos import local_client

MODES: tuple[Mode, ...] = typing.get_args(Mode)
S = typing.TypeVar("S", bound=BaseModel)


def sql_backends(modes: Iterable[Mode]) -> list[typing.Any]:
    """These modes with their endpoints' rows in PostgreSQL: in the in-memory model of it
    (with the in-memory storage account) and in a real server (with Azurite)."""
    return [
        param
        for m in modes
        for param in (
            pytest.param(("memory-sql", m), id=f"memory-sql-{m}"),
            pytest.param(
                ("postgres", m),
                id=f"postgres-{m}",
                marks=[pytest.mark.azurite, pytest.mark.postgres],
            ),
        )
    ]


SQL_BACKENDS = sql_backends(["token"])
"""Token mode with its endpoints' state in PostgreSQL."""
WINDOW_MODES: tuple[Mode, ...] = tuple(m for m in MODES if m != "token")
SQL_WINDOW_BACKENDS = sql_backends(WINDOW_MODES)
"""The window modes with their endpoints' rows in PostgreSQL."""


@dataclass
class SqlBackend(Backend):
    """A backend whose endpoints of ``sql_modes`` keep their rows in ``sql``; endpoints of
    other modes stay on tables and talk to them through blobs and queues."""

    sql_modes: tuple[Mode, ...] = ("token",)


@dataclass
class DocumentBackend(Backend):
    """A backend whose endpoints of ``store_modes`` keep their rows in the document store
    ``store``: blobs of ``account`` (``"blob"``) or ``cosmos``; endpoints of other modes stay
    on tables."""

    store: Store = "blob"
    store_modes: tuple[Mode, ...] = ("token",)
    cosmos: DocumentDatabase | None = None


def rows_store(backend: Backend, mode: Mode) -> Store:
    """Where an endpoint of ``mode`` keeps its rows on ``backend``."""
    if isinstance(backend, SqlBackend) and mode in backend.sql_modes:
        return "postgres"
    if isinstance(backend, DocumentBackend) and mode in backend.store_modes:
        return backend.store
    return "table"


def document_write(operation: Operation, store: Store) -> bool:
    """A write of a partition document, where a test aims a fault: Cosmos DB's own
    operations, or the blobs of a rows container (``blob.upload`` is a replace)."""
    if store == "cosmos":
        return operation.kind in ("cosmos.create", "cosmos.replace")
    return operation.kind in ("blob.create", "blob.upload") and "-rows/" in operation.target


def sql_modes(mode: str) -> tuple[Mode, ...]:
    """The modes a SQL or document backend parameter moves to its store: one, or ``all``."""
    return MODES if mode == "all" else (typing.cast(Mode, mode),)


def backend_modes(
    *,
    azurite: Iterable[Mode] = MODES,
    slow_azurite: Iterable[Mode] = (),
    sql: bool = True,
    documents: bool | None = None,
    real_documents: Iterable[Mode] = (),
    slow_real_documents: Iterable[Mode] = (),
) -> list[typing.Any]:
    """Parameters for the ``backend`` fixture below: every mode on the in-memory stores, and
    the given modes on Azurite (``slow_azurite`` ones only under ``-m slow``); with ``sql``,
    PostgreSQL endpoints too: token mode in the model and a real server (``SQL_BACKENDS``),
    every window mode in the model, and on a real server the window modes that run on
    Azurite here (a real server is used with Azurite, and costs as much); with
    ``documents`` (by default as ``sql``: a module whose tests count or fault table
    requests, or build a bus of their own, runs on tables alone), every mode on the
    in-memory document stores, and ``real_documents`` modes (``slow_real_documents`` ones
    under ``-m slow``) with their documents in the real ones: blobs on Azurite and the local
    Cosmos DB server (``document_backends``)."""
    params = [pytest.param(("memory", m), id=f"memory-{m}") for m in MODES]
    fast, slow = set(azurite), set(slow_azurite)
    for m in MODES:
        if m in fast or m in slow:
            marks = [pytest.mark.azurite] + ([pytest.mark.slow] if m not in fast else [])
            params.append(pytest.param(("azurite", m), id=f"azurite-{m}", marks=marks))
    if sql if documents is None else documents:
        params += document_backends(MODES, real=real_documents, slow=slow_real_documents)
    if not sql:
        return params
    params += SQL_BACKENDS
    for m in WINDOW_MODES:
        params.append(pytest.param(("memory-sql", m), id=f"memory-sql-{m}"))
        if m in fast or m in slow:
            marks = [pytest.mark.azurite, pytest.mark.postgres]
            marks += [pytest.mark.slow] if m not in fast else []
            params.append(pytest.param(("postgres", m), id=f"postgres-{m}", marks=marks))
    return params


@dataclass(frozen=True)
class DocumentStore:
    """A document store the pipeline tests run endpoints on: which ``store`` its endpoints
    declare, whether it is an in-memory model (run everywhere) or a real service (run for
    the modes a module names, with ``marks``)."""

    store: Store
    in_memory: bool
    marks: tuple[pytest.MarkDecorator, ...] = ()


DOCUMENT_STORES: dict[str, DocumentStore] = {
    "memory-cosmos": DocumentStore("cosmos", in_memory=True),
    "memory-blob": DocumentStore("blob", in_memory=True),
    "azurite-blob": DocumentStore("blob", in_memory=False, marks=(pytest.mark.azurite,)),
    "cosmos": DocumentStore(
        "cosmos", in_memory=False, marks=(pytest.mark.azurite, pytest.mark.cosmos)
    ),
}
"""Every document store backend, by the name its parameters carry: the one place a new one
is added, with its construction in ``document_backend``."""


def document_backends(
    modes: Iterable[Mode], *, real: Iterable[Mode] = (), slow: Iterable[Mode] = ()
) -> list[typing.Any]:
    """These modes with their endpoints' rows in each in-memory document store, and the
    ``real`` ones (among ``modes``) in each real one; the ``slow`` ones there under
    ``-m slow``."""
    chosen, fast, long = tuple(modes), set(real), set(slow)
    params = []
    for name, kind in DOCUMENT_STORES.items():
        for m in chosen:
            if kind.in_memory or m in fast or m in long:
                marks = [*kind.marks] + ([pytest.mark.slow] if m in long - fast else [])
                params.append(pytest.param((name, m), id=f"{name}-{m}", marks=marks))
    return params


DOCUMENT_BACKENDS = document_backends(["token"], real=["token"])
"""Token mode with its endpoints' rows in each document store, a real one included."""
DOCUMENT_WINDOW_BACKENDS = document_backends(WINDOW_MODES)
"""The window modes with their endpoints' rows in each in-memory document store."""


@pytest.fixture(name="backend", params=backend_modes(real_documents=["token"]))
async def per_mode_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """Overrides the suite's ``backend`` in modules that import it: one backend per (store,
    endpoint mode) pair; the ``mode`` fixture names the mode."""
    name, mode = request.param
    if name in DOCUMENT_STORES:
        async with document_backend(request, name, mode) as chosen:
            yield chosen
        return
    if name == "memory":
        clock = ManualClock()
        yield Backend(name, MemoryStorageAccount(clock=clock), clock)
        return
    if name == "memory-sql":
        clock = ManualClock()
        account = MemoryStorageAccount(clock=clock)
        yield SqlBackend(name, account, clock, MemorySqlDatabase(), sql_modes(mode))
        return
    endpoints = request.getfixturevalue("azurite")
    azure = AzureStorageAccount(StorageSettings(connection_string=endpoints.connection_string))
    database = None
    if name == "postgres":
        database = PostgresDatabase(PostgresSettings(url=request.getfixturevalue("postgres")))
    try:
        if database is None:
            yield Backend(name, azure)
        else:
            yield SqlBackend(name, azure, sql=database, sql_modes=sql_modes(mode))
    finally:
        await azure.close()
        if database is not None:
            await database.close()


@contextlib.asynccontextmanager
async def document_backend(
    request: pytest.FixtureRequest, name: str, mode: str
) -> AsyncIterator[DocumentBackend]:
    """The backend ``DOCUMENT_STORES`` names: the in-memory ones on a manual clock, the real
    ones on Azurite (and, for Cosmos DB, its server)."""
    kind = DOCUMENT_STORES[name]
    modes = sql_modes(mode)
    if kind.in_memory:
        clock = ManualClock()
        account = MemoryStorageAccount(clock=clock)
        model = MemoryDocumentDatabase() if kind.store == "cosmos" else None
        yield DocumentBackend(name, account, clock, None, kind.store, modes, model)
        return
    endpoints = request.getfixturevalue("azurite")
    azure = AzureStorageAccount(StorageSettings(connection_string=endpoints.connection_string))
    server: CosmosDatabase | None = None
    if kind.store == "cosmos":  # a database of its own on the session's local server
        client = local_client(request.getfixturevalue("cosmos"))
        server = CosmosDatabase(client, unique_name("db"))
    try:
        yield DocumentBackend(name, azure, None, None, kind.store, modes, server)
    finally:
        await azure.close()
        if server is not None:
            with contextlib.suppress(CosmosResourceNotFoundError):  # no harness created it
                await server.client.delete_database(server.name)
            await server.close()


@pytest.fixture(name="mode")
def endpoint_mode(request: pytest.FixtureRequest, backend: Backend) -> Mode:
    chosen: Mode = request.node.callspec.params["backend"][1]
    return chosen


@dataclass
class Harness:
    backend: Backend
    app: BusApp
    config: BusConfig
    instrumentation: Instrumentation = field(default_factory=Instrumentation)
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    crashes: int = 0

    def __post_init__(self) -> None:
        self.raw = self.backend.account
        self.account = InstrumentedAccount(self.raw, self.instrumentation)
        sql = self.backend.sql
        counted = None if sql is None else InstrumentedSql(sql, self.instrumentation)
        self.cosmos = self.backend.cosmos if isinstance(self.backend, DocumentBackend) else None
        documents = (
            None
            if self.cosmos is None
            else InstrumentedDocumentDatabase(self.cosmos, self.instrumentation)
        )
        # instrumented: processing
        self.bus = Bus(self.app, self.account, self.config, sql=counted, cosmos=documents)
        # uncounted: setup, sends and reading the outcome
        self.setup_bus = Bus(self.app, self.raw, self.config, sql=sql, cosmos=self.cosmos)
        settings = QueueSettings(max_dequeue_count=20, lease_seconds=30)
        self.workers = {
            name: QueueWorker(self.account, name, self._handler(name), settings)
            for name in self.app.endpoints
        }

    @classmethod
    async def create(cls, backend: Backend, app: BusApp, **config: object) -> Harness:
        suffix = unique_name("")[:10]
        settings: dict[str, object] = {
            "tokens_container": f"tokens{suffix}",
            "payloads_container": f"payloads{suffix}",
            "topics_container": f"topics{suffix}",
            "ingress_table": f"ingress{suffix}",
            "backoff_base": 0.001,
            "topic_cache_seconds": 0.0,
            **config,
        }
        if backend.clock is not None:
            settings.setdefault("clock", backend.clock)  # one clock for stores and bus
        bus_config = BusConfig(**settings)  # type: ignore[arg-type]
        if isinstance(backend, SqlBackend):
            # A SQL backend runs the same flow with its endpoints of the chosen modes keeping
            # their rows in the database; the others stay on tables and talk to them.
            for name, endpoint in app.endpoints.items():
                if endpoint.mode in backend.sql_modes:
                    app.endpoints[name] = replace(endpoint, store="postgres")
        if isinstance(backend, DocumentBackend):
            # Likewise with their rows in documents, a document per partition.
            for name, endpoint in app.endpoints.items():
                if endpoint.mode in backend.store_modes:
                    app.endpoints[name] = replace(endpoint, store=backend.store)
        harness = cls(backend, app, bus_config)
        stores = {name: e.store for name, e in app.endpoints.items()}
        if isinstance(harness.cosmos, CosmosDatabase):  # the model needs no containers
            await harness.cosmos.provision([n for n, store in stores.items() if store == "cosmos"])
        await provision(
            harness.raw,
            resources_of(
                bus_config,
                tuple(app.endpoints),
                [name for name, store in stores.items() if store == "blob"],
                [name for name, store in stores.items() if store == "cosmos"],
            ),
        )
        await harness.setup_bus.subscribe_all()
        return harness

    def _handler(self, endpoint: str):  # type: ignore[no-untyped-def]
        async def handle(raw: str, dequeue_count: int) -> None:
            outcome = await self.bus.receive(endpoint, raw, dequeue_count)
            self.outcomes[outcome] += 1

        return handle

    async def deliver(self, endpoint: str, message: QueueMessage) -> None:
        """One function invocation. A crash kills it before the acknowledgement; the
        platform then makes the message visible again (its lease ran out)."""
        try:
            await self.workers[endpoint].run_one(message)
        except SimulatedCrash:
            self.crashes += 1
            with contextlib.suppress(NotFound):  # gone if the crash came after the ack
                await self.raw.queue(endpoint).update(
                    message.id, message.pop_receipt, visibility_timeout=0
                )

    async def run_until_quiet(self, max_passes: int = 200) -> None:
        """Deliver every queued message, again and again, until all queues are empty.

        A message whose acknowledgement failed stays hidden for its lease; on the in-memory
        backend the clock is moved past the lease so that it comes back, as it would."""
        for _ in range(max_passes):
            busy = False
            for endpoint in self.app.endpoints:
                messages = await self.raw.queue(endpoint).receive(32, visibility_timeout=30)
                for message in messages:
                    busy = True
                    await self.deliver(endpoint, message)
            if busy:
                continue
            hidden = sum([await self.raw.queue(e).approximate_count() for e in self.app.endpoints])
            if hidden and self.backend.clock is not None:
                self.backend.clock.advance(31)
                continue
            return
        raise AssertionError("queues did not drain")

    def rows(self, endpoint: str) -> EndpointState:
        """Where ``endpoint`` keeps state, O(m) and audit rows (its table, the database or its
        documents)."""
        return self.setup_bus.endpoint_state(endpoint)

    def cleanup_rows(self, account: StorageAccount | None = None) -> dict[str, EndpointRows]:
        """Every endpoint's rows as a cleanup is given them: in the store it declares, its
        table or blob documents on ``account`` (default: the uncounted one), or the uncounted
        database or document database."""
        return endpoints_rows(
            self.app.endpoints.values(), account or self.raw, self.backend.sql, self.cosmos
        )

    async def row_keys(self, endpoint: str) -> list[tuple[str, str]]:
        """(partition, row) of every row ``endpoint`` keeps, whichever its store; SQL rows and
        rows in documents are named as their Table Storage counterparts would be."""
        if self.app.get(endpoint).store == "table":
            return [
                (e.partition_key, e.row_key) async for e in self.raw.table(endpoint).query_all()
            ]
        rows = self.rows(endpoint)
        keys = {(s.partition_key, STATE_ROW) async for s in rows.states()}
        keys |= {(o.partition_key, outbox_row(o.message_id)) async for o in rows.outbox_records()}
        keys |= {(e.partition_key, e.row_key) async for e in rows.audit_entities()}
        keys |= {(e.partition_key, e.row_key) async for e in mode_rows_of(rows.rows())}
        return sorted(keys)

    async def state(self, endpoint: str, partition: str) -> Ledger:
        async for row in self.rows(endpoint).states():
            if row.partition_key == partition:
                return Ledger.model_validate_json(row.data)
        return Ledger()

    async def applied_state(self, endpoint: str, partition: str, model: type[S]) -> S:
        """The state of ``partition`` at ``endpoint`` as ``model`` (its default if none); at
        a saga, the live instance's state (a completed one has none: ``saga_instance``)."""
        async for row in self.rows(endpoint).states():
            if row.partition_key != partition:
                continue
            if row.type != SAGA_ROW_TYPE:
                return model.model_validate_json(row.data)
            instance = SagaRow.model_validate_json(row.data)
            if instance.completed:
                raise AssertionError(f"{endpoint} instance {partition!r} is completed")
            return model.model_validate(instance.state or {})
        return model()

    async def saga_instance(self, endpoint: str, partition: str) -> SagaRow | None:
        """Saga ``endpoint``'s instance ``partition`` as stored (None: none)."""
        async for row in self.rows(endpoint).states():
            if row.partition_key == partition:
                assert row.type == SAGA_ROW_TYPE, row
                return SagaRow.model_validate_json(row.data)
        return None

    async def applied(self, endpoint: str) -> list[str]:
        """Every message id applied at ``endpoint``, across partitions (duplicates kept)."""
        ids: list[str] = []
        async for row in self.rows(endpoint).states():
            ids += Ledger.model_validate_json(row.data).applied
        return ids

    async def audit_ids(self, endpoint: str) -> list[str]:
        return [str(e["message_id"]) async for e in self.rows(endpoint).audit_entities()]

    async def outbox_records(self, endpoint: str) -> list[OutboxRecord]:
        return [r async for r in self.rows(endpoint).outbox_records()]

    async def tokens(self) -> list[str]:
        """Every token in the container."""
        return [p.name async for p in self.raw.blob_container(self.config.tokens_container).list()]

    async def tokens_in_flight(self) -> list[str]:
        """Every token but those processed messages leave for the cleanup's R7
        (``shared.bus.receiver``): a token claimed by a committed O(m) whose incoming token
        it is, with that O(m)'s claim id. A token that is anything else (unclaimed, claimed
        for an uncommitted O(m), or claimed by a claim id no O(m) holds) is still in flight
        or leaked, and listed."""
        processed: dict[str, str] = {}
        for endpoint in self.app.endpoints:
            for record in await self.outbox_records(endpoint):
                if record.committed:
                    processed[record.incoming_token] = record.claim
        container = self.raw.blob_container(self.config.tokens_container)
        return [
            blob.name
            async for blob in container.list()
            if blob.name not in processed or blob.metadata.get("claim") != processed[blob.name]
        ]

    async def queue_depths(self) -> dict[str, int]:
        depths = {}
        for endpoint in self.app.endpoints:
            for name in (endpoint, poison_queue(endpoint)):
                depths[name] = await self.raw.queue(name).approximate_count()
        return depths

    async def poison_messages(self, endpoint: str) -> list[dict[str, object]]:
        messages = await self.raw.queue(poison_queue(endpoint)).peek(32)
        return [json.loads(m.content) for m in messages]


async def committed_tokens(harness: Harness) -> set[str]:
    names: set[str] = set()
    for endpoint in harness.app.endpoints:
        for record in await harness.outbox_records(endpoint):
            names |= {o.token for o in record.outgoing}
    return names


async def committed_attempts(harness: Harness) -> set[str]:
    """Attempt ids of every output token committed by any endpoint, whatever its mode."""
    attempts: set[str] = set()
    for endpoint in harness.app.endpoints:
        for record in await harness.outbox_records(endpoint):
            attempts |= {o.attempt_id for o in record.outgoing}
        async for entity in mode_rows_of(harness.rows(endpoint).rows()):
            key = entity.row_key
            if key.startswith(PROCESSED_PREFIX):
                attempts |= ProcessedRecord.from_entity(entity).committed_attempts
            elif key.startswith(INDEX_PREFIX):
                attempts |= IndexEntry.from_entity(entity).committed_attempts
            elif key == STATE_ROW and "outbox_parts" in entity.properties:
                for entry in StateEntity.from_entity(entity).entries.values():
                    attempts |= set(entry.sent)
    return attempts


async def mode_rows_of(rows: EndpointRows) -> AsyncIterator[Entity]:
    """Every window-mode row an endpoint keeps (on tables: every row of its table)."""
    async for entity in rows.every():
        yield entity


def attempt_of(token: str) -> str:
    match = TOKEN_NAME.fullmatch(token)
    assert match is not None, token
    return match["attempt"]
