"""One measurement: provision fresh resources, enqueue the roots, drain them with one or more
hosts, and turn what the hosts report into the figures of the table."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.bench.cleanup_pass import CleanupCount, clean_round
from lab.bench.host import HostResult, HostSpec
from lab.bench.launch import in_process, in_processes
from lab.bench.modes import BenchMode
from lab.bench.prices import by_class, usd_per_million
from lab.bench.residue import Residue, measure_residue
from lab.bench.seed import provision_run, seed
from lab.bench.stores import BenchRows
from lab.bench.timing import percentile
from lab.bench.workload import Names
from shared.bus.state.connection import PostgresSettings
from shared.bus.state.stores import DocumentDatabase, PostgresDatabase
from shared.errors import InvalidValue
from shared.stores.account import StorageAccount
from shared.stores.cosmos.settings import CosmosSettings


@dataclass(frozen=True)
class Plan:
    roots: int
    """Root messages; each is handled twice (sender, then sink)."""
    concurrency: int = 16
    processes: int = 1
    partitions: int | None = None
    """State partitions the roots spread over; None gives each root its own, so no two
    messages in flight contend for one partition's ETag."""

    def __post_init__(self) -> None:
        if self.roots < 1:
            raise InvalidValue("a measurement needs at least one root message")
        if self.processes < 1:
            raise InvalidValue("a measurement needs at least one host process")
        if self.partitions is not None and self.partitions < 1:
            raise InvalidValue("partitions must be at least 1")

    @property
    def messages(self) -> int:
        return 2 * self.roots


@dataclass
class Measurement:
    mode: str
    available: bool
    concurrency: int
    processes: int
    roots: int
    error: str | None = None
    handled: int = 0
    failures: int = 0
    elapsed_s: float = 0.0
    throughput_msgs_per_s: float = 0.0
    ops_per_message: float = 0.0
    operations: dict[str, int] = field(default_factory=dict)
    """Per kind, over the drain; empty queue receives are left out (reported apart)."""
    operation_ms: dict[str, float] = field(default_factory=dict)
    """Mean wall time of one operation of each kind, as the pipeline waited for it (empty
    receives included)."""
    empty_polls: int = 0
    ingress_ops_per_root: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    latency_samples: int = 0
    service_p50_ms: float = 0.0
    service_p99_ms: float = 0.0
    residue: int = 0
    residue_kinds: dict[str, int] = field(default_factory=dict)
    ingress_rows: int = 0
    poisoned: int = 0
    peak_rss_mb: float | None = None
    """Highest ru_maxrss of the host processes; None when the host ran in the caller."""
    rss_growth_mb: float | None = None
    client_cpu_ms_per_message: float = 0.0
    emulator_cpu_ms_per_message: float | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    cleanup_operations: dict[str, int] = field(default_factory=dict)
    """Per kind, over the cleanup pass after each round (``lab.bench.cleanup_pass``)."""
    cleanup_ops_per_message: float = 0.0
    whole_ops_per_message: float = 0.0
    """The hot path's and the cleanup's requests per handled message, together."""
    request_units_per_message: float | None = None
    """Cosmos DB request units the hosts were charged per handled message, as the account
    reported them (None: the mode has no Cosmos DB endpoint; the local server charges 1 per
    request, see ``lab.bench.request_units``)."""
    cleanup_request_units_per_message: float | None = None
    usd_per_million_messages: dict[str, float] = field(default_factory=dict)
    """``hot_path``, ``cleanup`` and ``whole`` at ``lab.bench.prices.PRICES``."""
    requests_by_class: dict[str, dict[str, float]] = field(default_factory=dict)
    """``hot_path`` and ``cleanup``: requests per handled message by billing class."""
    cleanup_removed: dict[str, int] = field(default_factory=dict)
    residue_after_cleanup: dict[str, int] = field(default_factory=dict)
    """Rows and blobs left once the cleanup ran, by kind (business state rows included)."""

    @property
    def ok(self) -> bool:
        return self.available and self.error is None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Round:
    """One drain of one mode: what its hosts reported and what it left behind."""

    roots: int
    go: float
    hosts: list[HostResult]
    residue: Residue
    seed_ops: int
    emulator_cpu_s: float | None
    cleanup: CleanupCount | None = None
    """The counted cleanup pass that followed the drain; None for the floor."""

    @property
    def elapsed_s(self) -> float:
        finished = max((r.last_done_at for r in self.hosts), default=self.go)
        return max(finished - self.go, 1e-9)


def _add(total: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


def summarise(mode: BenchMode, plan: Plan, rounds: list[Round], isolated: bool) -> Measurement:
    """Fold the rounds of one mode into its figures: sums for counts and times (so the
    throughput is all messages over all drain time), pooled samples for the percentiles.
    Memory is only meaningful when every host had a process of its own (``isolated``)."""
    m = Measurement(mode.label, mode.available, plan.concurrency, plan.processes, plan.roots)
    hosts = [h for r in rounds for h in r.hosts]
    m.handled = sum(h.handled for h in hosts)
    m.failures = sum(h.failures for h in hosts)
    m.elapsed_s = sum(r.elapsed_s for r in rounds)
    m.throughput_msgs_per_s = m.handled / m.elapsed_s if rounds else 0.0
    m.empty_polls = sum(h.empty_polls for h in hosts)
    operations: dict[str, int] = {}
    waited: dict[str, float] = {}
    outcomes: dict[str, int] = {}
    for h in hosts:
        _add(operations, h.operations)
        _add(waited, h.operation_seconds)
        _add(outcomes, h.outcomes)
    # An empty receive is the listener waiting, not work done for a message.
    operations["queue.receive"] = operations.get("queue.receive", 0) - m.empty_polls
    m.operations = dict(sorted(operations.items()))
    m.operation_ms = {
        kind: round(1000 * waited[kind] / max(n, 1), 2)
        for kind, n in sorted(operations.items())
        if kind in waited and kind != "queue.receive"
    }
    m.ops_per_message = sum(operations.values()) / max(m.handled, 1)
    m.outcomes = outcomes
    latencies = [x for h in hosts for x in h.latencies_ms]
    service = [x for h in hosts for x in h.service_ms]
    m.latency_samples = len(latencies)
    m.p50_ms, m.p99_ms = percentile(latencies, 0.5), percentile(latencies, 0.99)
    m.service_p50_ms, m.service_p99_ms = percentile(service, 0.5), percentile(service, 0.99)
    m.client_cpu_ms_per_message = 1000 * sum(h.cpu_seconds for h in hosts) / max(m.handled, 1)
    emulator = [r.emulator_cpu_s for r in rounds]
    if rounds and all(e is not None for e in emulator):
        m.emulator_cpu_ms_per_message = 1000 * sum(e or 0.0 for e in emulator) / max(m.handled, 1)
    if isolated and hosts:
        m.peak_rss_mb = max(h.peak_rss_kb for h in hosts) / 1024
        m.rss_growth_mb = max(h.peak_rss_kb - h.rss_before_kb for h in hosts) / 1024
    m.ingress_ops_per_root = sum(r.seed_ops for r in rounds) / max(plan.roots, 1)
    kinds: dict[str, int] = {}
    for r in rounds:
        _add(kinds, r.residue.kinds)
    m.residue = sum(r.residue.total for r in rounds)
    m.residue_kinds = dict(sorted(kinds.items()))
    m.ingress_rows = sum(r.residue.ingress_rows for r in rounds)
    m.poisoned = sum(r.residue.poisoned for r in rounds)
    _whole_cost(m, rounds, operations)
    charged = [h.request_units for h in hosts]
    if hosts and all(units is not None for units in charged):
        m.request_units_per_message = sum(u or 0.0 for u in charged) / max(m.handled, 1)
    cleanup_charged = [r.cleanup.request_units for r in rounds if r.cleanup is not None]
    if cleanup_charged and all(units is not None for units in cleanup_charged):
        m.cleanup_request_units_per_message = sum(u or 0.0 for u in cleanup_charged) / max(
            m.handled, 1
        )
    left = sum(r.residue.left_in_queues for r in rounds)
    if m.handled != plan.messages or m.poisoned or left:
        m.error = (
            f"incomplete run: handled {m.handled} of {plan.messages} messages, "
            f"{m.poisoned} poisoned, {left} left in the queues"
        )
    return m


def _whole_cost(m: Measurement, rounds: list[Round], hot_path: dict[str, int]) -> None:
    """The cleanup's requests beside the hot path's, per handled message and in money."""
    cleanup: dict[str, int] = {}
    removed: dict[str, int] = {}
    after: dict[str, int] = {}
    for r in rounds:
        if r.cleanup is not None:
            _add(cleanup, r.cleanup.operations)
            _add(removed, r.cleanup.removed)
            _add(after, dict(r.cleanup.residue_after.kinds))
    handled = max(m.handled, 1)
    m.cleanup_operations = dict(sorted(cleanup.items()))
    m.cleanup_removed = dict(sorted(removed.items()))
    m.residue_after_cleanup = dict(sorted(after.items()))
    m.cleanup_ops_per_message = sum(cleanup.values()) / handled
    m.whole_ops_per_message = m.ops_per_message + m.cleanup_ops_per_message
    hot_usd = usd_per_million(hot_path, handled)
    cleanup_usd = usd_per_million(cleanup, handled)
    m.usd_per_million_messages = {
        "hot_path": round(hot_usd, 4),
        "cleanup": round(cleanup_usd, 4),
        "whole": round(hot_usd + cleanup_usd, 4),
    }
    m.requests_by_class = {
        part: {k: round(n / handled, 4) for k, n in by_class(ops).items()}
        for part, ops in (("hot_path", hot_path), ("cleanup", cleanup))
    }


async def run_round(
    raw: StorageAccount,
    mode: BenchMode,
    plan: Plan,
    roots: int,
    *,
    separate_processes: bool,
    connection_string: str | None = None,
    emulator_cpu: Callable[[], float] | None = None,
    postgres_url: str | None = None,
    cosmos: DocumentDatabase | None = None,
    cosmos_settings: CosmosSettings | None = None,
) -> Round:
    """Provision fresh resources, enqueue ``roots`` roots, drain them, count the residue.
    Cosmos DB endpoints are on ``cosmos`` for in-process hosts (a database of the caller's)
    or on the account of ``cosmos_settings`` for host processes."""
    tag = uuid.uuid4().hex[:10]
    specs = [
        HostSpec(
            mode.label,
            mode.bus_mode,
            tag,
            plan.concurrency,
            connection_string,
            mode.store,
            postgres_url,
            cosmos_settings,
        )
        for _ in range(plan.processes)
    ]
    names = specs[0].names
    await provision_run(raw, names, mode.store)
    stores = await _round_stores(mode, names, postgres_url, cosmos, cosmos_settings)
    try:
        seed_ops = await seed(
            raw, names, mode.bus_mode, specs[0].bus_config(), roots, plan.partitions or roots
        )
        cpu_before = emulator_cpu() if emulator_cpu else None
        if separate_processes:
            go, hosts = await in_processes(specs, raw)
        else:
            go, hosts = await in_process(specs, raw, cosmos)
        emulator_cpu_s = (
            emulator_cpu() - cpu_before if emulator_cpu and cpu_before is not None else None
        )
        residue = await measure_residue(raw, names, stores)
        cleanup = (
            None
            if mode.bus_mode is None
            else await clean_round(raw, names, mode.bus_mode, specs[0].bus_config(), stores)
        )
    finally:
        await stores.close()
    return Round(roots, go, hosts, residue, seed_ops, emulator_cpu_s, cleanup)


async def _round_stores(
    mode: BenchMode,
    names: Names,
    postgres_url: str | None,
    cosmos: DocumentDatabase | None,
    cosmos_settings: CosmosSettings | None,
) -> BenchRows:
    """The round's rows as the bench reads and cleans them, their Cosmos DB containers
    created (uncounted, as the round's other resources)."""
    if mode.store == "postgres":
        return BenchRows(mode.store, PostgresDatabase(PostgresSettings(url=postgres_url)))
    if mode.store != "cosmos" or cosmos is not None:
        return BenchRows(mode.store, cosmos=cosmos)
    if cosmos_settings is None:
        raise InvalidValue(f"{mode.label}: Cosmos DB endpoints need their account")
    # Imported for Cosmos DB rounds alone, as in the host processes.
    from lab.bench.request_units import RequestCharges, charged_database

    charges = RequestCharges()
    database = charged_database(cosmos_settings, charges)
    try:
        await database.provision(names.endpoints)
    except BaseException:
        await database.close()
        raise
    return BenchRows(mode.store, cosmos=database, charges=charges)


def split(total: int, parts: int) -> list[int]:
    """``total`` roots over ``parts`` rounds, as evenly as possible."""
    if parts < 1 or parts > total:
        raise InvalidValue(f"cannot split {total} roots into {parts} rounds")
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def measure_side_by_side(
    raw: StorageAccount,
    modes: list[BenchMode],
    plan: Plan,
    *,
    rounds: int = 1,
    separate_processes: bool,
    connection_string: str | None = None,
    emulator_cpu: Callable[[], float] | None = None,
    progress: Callable[[BenchMode, Round | None, str | None], None] | None = None,
    postgres_url: str | None = None,
    cosmos: DocumentDatabase | None = None,
    cosmos_settings: CosmosSettings | None = None,
) -> list[Measurement]:
    """Run ``modes`` in ``rounds`` interleaved rounds (forward, then backward, ...) that split
    ``plan.roots`` between them, so a machine that gets busier or quieter during the bench
    weighs on every mode alike. A mode the bus does not offer, or one that fails, comes back
    as a Measurement saying so rather than stopping the bench."""
    done: dict[str, list[Round]] = {m.label: [] for m in modes}
    errors: dict[str, str] = {}
    for number, roots in enumerate(split(plan.roots, rounds)):
        for mode in modes if number % 2 == 0 else list(reversed(modes)):
            if not mode.available or mode.label in errors:
                continue
            try:
                result = await run_round(
                    raw,
                    mode,
                    plan,
                    roots,
                    separate_processes=separate_processes,
                    connection_string=connection_string,
                    emulator_cpu=emulator_cpu,
                    postgres_url=postgres_url,
                    cosmos=cosmos,
                    cosmos_settings=cosmos_settings,
                )
            except Exception as e:  # reported in the table; the other modes go on
                errors[mode.label] = f"{type(e).__name__}: {e}"
                if progress:
                    progress(mode, None, errors[mode.label])
                continue
            done[mode.label].append(result)
            if progress:
                progress(mode, result, None)
    measurements = []
    for mode in modes:
        if not mode.available:
            measurements.append(
                Measurement(mode.label, False, plan.concurrency, plan.processes, plan.roots)
            )
            continue
        measurement = summarise(mode, plan, done[mode.label], separate_processes)
        if mode.label in errors:
            measurement.error = errors[mode.label]
        measurements.append(measurement)
    return measurements


async def measure(
    raw: StorageAccount,
    mode: BenchMode,
    plan: Plan,
    *,
    separate_processes: bool,
    connection_string: str | None = None,
    emulator_cpu: Callable[[], float] | None = None,
    postgres_url: str | None = None,
    cosmos: DocumentDatabase | None = None,
    cosmos_settings: CosmosSettings | None = None,
) -> Measurement:
    """One mode, one round."""
    (measurement,) = await measure_side_by_side(
        raw,
        [mode],
        plan,
        separate_processes=separate_processes,
        connection_string=connection_string,
        emulator_cpu=emulator_cpu,
        postgres_url=postgres_url,
        cosmos=cosmos,
        cosmos_settings=cosmos_settings,
    )
    return measurement
