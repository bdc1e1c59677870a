"""One benchmark host: queue listeners for the sender and sink endpoints of one mode.

It runs either inside the calling process (the in-memory backend, for tests) or as its own OS
process (``process_main``), which is how the bench measures each mode's peak memory and runs
two hosts on the same queues. Over a pipe, the process says ``READY`` once connected, starts
draining on ``GO``, and sends back its result as a dict.

Each endpoint queue gets its own ``QueueWorker``, as each queue-triggered function has its own
listener in the Functions host, with host.json's settings except ``batchSize`` (the concurrency
under test, with ``newBatchThreshold`` at half of it, the host's default ratio) and a shorter
``maxPollingInterval``. The host stops once both queues are empty: the sender's queue is
checked first, so every forwarded message was already enqueued when the sink's is checked.
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import resource
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from lab.bench.floor import floor_handlers
from lab.bench.modes import as_mode
from lab.bench.timing import TimedInstrumentation
from lab.bench.workload import Names, build_app
from lab.local.azurite import REPO_ROOT
from shared.bus import Bus, BusConfig
from shared.bus.app import Store
from shared.bus.state.connection import PostgresSettings
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.stores import DocumentDatabase, PostgresDatabase
from shared.errors import InvalidValue
from shared.host_json import QueueSettings
from shared.queue_trigger import Handler, QueueWorker
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.instrumented import InstrumentedAccount
from shared.stores.instrumented_documents import InstrumentedDocumentDatabase
from shared.stores.queue import QueueMessage

if TYPE_CHECKING:
    from lab.bench.request_units import RequestCharges

MAX_POLLING_INTERVAL = 0.25
"""host.json says 2 s; capped so an idle sink queue is picked up quickly once the first
forwarded messages arrive. The same for every mode."""
DRAIN_CHECK_SECONDS = 0.05
READY = "READY"
GO = "GO"


@dataclass(frozen=True)
class HostSpec:
    label: str
    bus_mode: str | None
    """None runs the at-least-once floor."""
    tag: str
    concurrency: int
    connection_string: str | None = None
    """Where the host process connects; None only for a host inside the caller's process."""
    store: Store = "table"
    postgres_url: str | None = None
    """The database of ``store="postgres"`` endpoints."""
    cosmos: CosmosSettings | None = None
    """The account of ``store="cosmos"`` endpoints, for a host in its own process."""

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 32:
            raise InvalidValue(f"concurrency must be 1-32 (a queue batch), not {self.concurrency}")

    @property
    def names(self) -> Names:
        return Names(self.tag)

    def bus_config(self) -> BusConfig:
        names = self.names
        return BusConfig(
            tokens_container=names.tokens,
            topics_container=names.topics,
            ingress_table=names.ingress,
        )


@dataclass
class HostResult:
    handled: int = 0
    failures: int = 0
    empty_polls: int = 0
    operations: dict[str, int] = field(default_factory=dict)
    operation_seconds: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    """Enqueue (by the sending handler) to acknowledged, per forwarded message seen here."""
    service_ms: list[float] = field(default_factory=list)
    """Received to acknowledged, per message."""
    started_at: float = 0.0
    last_done_at: float = 0.0
    """Wall-clock time (time.time()) of the last acknowledgement."""
    cpu_seconds: float = 0.0
    peak_rss_kb: int = 0
    rss_before_kb: int = 0
    request_units: float | None = None
    """What the Cosmos DB account charged this host (None: it has no Cosmos DB endpoint)."""


class _TimedWorker(QueueWorker):
    """A QueueWorker that records, per message, when it was received and acknowledged."""

    def __init__(
        self,
        account: StorageAccount,
        queue_name: str,
        handler: Handler,
        settings: QueueSettings,
        instrumentation: TimedInstrumentation,
        result: HostResult,
    ) -> None:
        super().__init__(account, queue_name, handler, settings)
        self._instrumentation = instrumentation
        self._result = result

    async def run_one(self, message: QueueMessage) -> bool:
        received = time.perf_counter()
        ok = await super().run_one(message)
        done = time.perf_counter()
        result = self._result
        result.service_ms.append((done - received) * 1000)
        enqueued = self._instrumentation.enqueued.pop(message.id, None)
        if enqueued is not None:
            result.latencies_ms.append((done - enqueued) * 1000)
        if ok:
            result.handled += 1
            result.last_done_at = time.time()
        else:
            result.failures += 1
        return ok


class BenchHost:
    """``cosmos``: the database of ``store="cosmos"`` endpoints, counted here; the host
    closes it when its drain ends."""

    def __init__(
        self, spec: HostSpec, raw: StorageAccount, cosmos: DocumentDatabase | None = None
    ) -> None:
        self.spec = spec
        self.raw = raw
        self.instrumentation = TimedInstrumentation()
        self.account = InstrumentedAccount(raw, self.instrumentation)
        self.result = HostResult()
        self._outcomes: Counter[str] = Counter()
        self.database: PostgresDatabase | None = None
        self.cosmos = cosmos
        names = spec.names
        settings = replace(
            QueueSettings.from_host_json(REPO_ROOT / "host.json"),
            batch_size=spec.concurrency,
            new_batch_threshold=spec.concurrency // 2,
            max_polling_interval=MAX_POLLING_INTERVAL,
        )
        handlers = (
            floor_handlers(self.account, names)
            if spec.bus_mode is None
            else self._bus_handlers(spec.bus_mode)
        )
        self.workers = [
            _TimedWorker(
                self.account, queue, handlers[queue], settings, self.instrumentation, self.result
            )
            for queue in names.endpoints
        ]

    def _bus_handlers(self, bus_mode: str) -> dict[str, Handler]:
        spec = self.spec
        if spec.store == "postgres":
            if spec.postgres_url is None:
                raise InvalidValue(f"{spec.label}: PostgreSQL endpoints need a database URL")
            # A connection for every message in flight on both queues: the pool is not what
            # is measured.
            settings = PostgresSettings(url=spec.postgres_url, pool_size=2 * spec.concurrency)
            self.database = PostgresDatabase(settings)
        if spec.store == "cosmos" and self.cosmos is None:
            raise InvalidValue(f"{spec.label}: Cosmos DB endpoints need their database")
        app = build_app(spec.names, as_mode(bus_mode), spec.store)
        sql = (
            None if self.database is None else InstrumentedSql(self.database, self.instrumentation)
        )
        cosmos = (
            None
            if self.cosmos is None
            else InstrumentedDocumentDatabase(self.cosmos, self.instrumentation)
        )
        config = spec.bus_config()
        bus = Bus(app, self.account, config, sql=sql, cosmos=cosmos)

        def handler(endpoint: str) -> Handler:
            async def handle(raw: str, dequeue_count: int) -> None:
                outcome = await bus.receive(endpoint, raw, dequeue_count)
                self._outcomes[outcome.value] += 1

            return handle

        return {e: handler(e) for e in self.spec.names.endpoints}

    async def _drained(self) -> bool:
        # Uncounted (raw account): the stop check is the bench's, not the mode's, cost.
        for queue in self.spec.names.endpoints:  # sender first: see the module docstring
            if await self.raw.queue(queue).approximate_count() > 0:
                return False
        return True

    async def _stop_when_drained(self, stopping: asyncio.Event) -> None:
        while True:
            if await self._drained():
                stopping.set()
                return
            await asyncio.sleep(DRAIN_CHECK_SECONDS)

    async def drain(self) -> HostResult:
        """Process until both queues are empty; returns what this host did."""
        before = resource.getrusage(resource.RUSAGE_SELF)
        result = self.result
        result.rss_before_kb = before.ru_maxrss
        result.started_at = time.time()
        stopping = asyncio.Event()
        await asyncio.gather(
            self._stop_when_drained(stopping), *(w.run(stopping) for w in self.workers)
        )
        after = resource.getrusage(resource.RUSAGE_SELF)
        result.cpu_seconds = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        result.peak_rss_kb = after.ru_maxrss
        result.operations = dict(self.instrumentation.kinds_since(0))
        result.empty_polls = self.instrumentation.empty_receives
        result.operation_seconds = dict(self.instrumentation.seconds)
        result.outcomes = dict(self._outcomes)
        for database in (self.database, self.cosmos):
            if database is not None:
                await database.close()
        return result


async def _serve(spec: HostSpec, conn: Connection) -> HostResult:
    from shared.stores.azure import AzureStorageAccount

    if spec.connection_string is None:
        raise InvalidValue("a host process needs a connection string")
    charges: RequestCharges | None = None
    cosmos = None
    if spec.store == "cosmos":
        # Imported for Cosmos DB hosts alone: the SDK would weigh on every mode's peak memory.
        from lab.bench.request_units import RequestCharges, charged_database

        if spec.cosmos is None:
            raise InvalidValue(f"{spec.label}: Cosmos DB endpoints need their account")
        charges = RequestCharges()
        cosmos = charged_database(spec.cosmos, charges)
    async with AzureStorageAccount(StorageSettings(spec.connection_string)) as raw:
        host = BenchHost(spec, raw, cosmos)
        conn.send(READY)
        if conn.recv() != GO:  # blocks this process only, and nothing else runs yet
            raise InvalidValue("the bench did not say GO")
        result = await host.drain()
    if charges is not None:
        result.request_units = charges.units
    return result


def process_main(spec: HostSpec, conn: Connection) -> None:
    """Body of a host process: report READY, wait for GO, drain, send the result back.

    With ``BENCH_PROFILE`` set to a directory, the host runs under cProfile and writes
    ``<label>-<pid>.prof`` there: where a mode's client CPU goes (see docs/benchmarks.md)."""
    profile_dir = os.environ.get("BENCH_PROFILE")
    profiler = cProfile.Profile() if profile_dir else None
    try:
        if profiler is not None:
            profiler.enable()
        result = asyncio.run(_serve(spec, conn))
        if profiler is not None and profile_dir:
            profiler.disable()
            Path(profile_dir).mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(str(Path(profile_dir) / f"{spec.label}-{os.getpid()}.prof"))
        conn.send(asdict(result))
    except Exception as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})
        raise
    finally:
        conn.close()
