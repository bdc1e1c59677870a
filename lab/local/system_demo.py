"""``make demo`` as a system of services: the sample system (``shared.sample.system``) in three
local hosts over one messaging emulator.

``orders`` (orders and loyalty, their rows in an Azurite of its own, loyalty's as blob
documents there; the storefront's sessions in a PostgreSQL database of its own),
``payments`` (its rows in PostgreSQL, charging through the payment provider) and ``shipping``
(its rows in the local Cosmos DB server, its other state in another Azurite of its own; with
``--no-documents`` loyalty and shipping keep theirs in tables) each run in their own
``python -m lab.host`` process, with their app name (``BUS_APP_NAME``) and
their state connection (``BUS_STATE_STORAGE_SETTING``), over one messaging Azurite where every
queue, token, payload and topic lives. Clients post the orders to ``orders``' HTTP ingress as
in the single-app demo, except every second order paid at once, which they place through
``orders``' own route ``POST /api/orders`` instead: the order's row in the sample's
``sample_orders`` table and its PlaceOrder commit in one transactional session of
``storefront`` (``SAMPLE_STOREFRONT_STORE=postgres``), under an Idempotency-Key, with the same
repeats and retries, except that half of the failed requests there are given up by their
client, as a closed browser would: such an order must exist wholly or not at all. A few more
requests there must be refused and write nothing: bad bodies (400) and orders placed again
under another key (409). Every host has today's faults: its
signals sent twice at random, crashes at random storage and SQL operations (HTTP invocations
included: a session may stop anywhere between its first read and its signals), and its own
SIGKILL and restart once 40% of its deliveries are processed. Mid-run, two outages on top:
``payments``' host is killed and stays down for a while, and the server of ``shipping``'s rows
(the Cosmos DB server, or its state emulator with ``--no-documents``) is frozen (SIGSTOP, a
store that stops answering) for a while, then resumed; the other apps
keep going and the waiting messages are processed once it is back.

The hosts run with ``BUS_SESSION_RESEND_SECONDS`` at 5 s. A session whose request stopped
after its commit and before its signals holds messages no queue shows yet: while one waits,
the demo does not call the queues empty, and once it has waited 5 s it runs ``orders``'
cleanup as its timer would, whose sessions task sends its signals. Once every queue is empty
and no session waits, the hosts stop gracefully and each app's cleanup runs, the three at
once: no token or payload may be left and none reported as ``bad_origin`` (another app's are
kept as ``other_app``), and no session may be left waiting or open. The outcome is checked
whole and per app: every message sent, by the clients, a handler or a session of any app, has
exactly one audit row in the app that processed it (a session's own row records what it sent
and is no processing), every message from one app to another is counted once sent and once
processed, the business state is exact, the provider's ledger holds each charge and refund
once, each order accepted at ``POST /api/orders`` has exactly one row in ``sample_orders`` and
its PlaceOrder processed once, and no other order has a row; an order given up by its client
is carried through the whole flow if its session committed (its row exists), and has no state
anywhere if not. Then the Spark audit reads the
whole system (``python -m shared.audit run --system``, from a system file of the three apps
written in the work folder, ``orders`` and ``payments`` as postgres apps, ``shipping`` as a
cosmos app), each app's rows from its own stores, and must pass (``--no-audit`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp
import asyncpg

from lab.host.chaos import CRASH_RATE, DUPLICATE_RATE, SEED
from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT, Azurite
from lab.local.cosmos import CosmosServer
from lab.local.outcome_log import OUTCOME_LOG_SETTING
from lab.local.payments import Provider, provider_args
from lab.local.postgres import PostgresServer
from lab.provider.process import provider_process
from shared.app_loader import APP_SETTING
from shared.app_settings import APP_NAME, SESSION_RESEND
from shared.bus import Outcome
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW
from shared.bus.state.connection import URL_SETTING
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.sample.charges import PAYMENTS_STORE
from shared.sample.storefront import STOREFRONT_STORE
from shared.sample.stores import LOYALTY_STORE, SHIPPING_STORE
from shared.settings import DEFAULT_SETTING, STATE_STORAGE_SETTING_NAME, resolve_settings
from shared.stores.account import StorageAccount

SYSTEM_MODULE = "shared.sample.system"
STATE_CONNECTION = "AppStateStorage"
"""The connection setting each app with a state account of its own names in
``BUS_STATE_STORAGE_SETTING``."""
DELIVERIES = {"orders": 2, "payments": 3, "shipping": 2}
"""Per order placed: PlaceOrder and OrderPlaced to loyalty; ChargePayment, its EffectRequest
to the performer and ChargeAnswered; OrderPlaced to shipping and ShipOrder."""
HOST_DOWN = "payments"
"""The app whose host is killed mid-run and kept down for ``SystemOptions.down_seconds``."""
STATE_DOWN = "shipping"
"""The app whose state emulator stops answering mid-run for ``down_seconds``."""
DATABASES = {"payments": "postgres", "orders": "orders"}
"""The apps with a PostgreSQL database, each its own on the demo's server: ``payments``' rows,
and ``orders``' storefront's sessions beside the sample's ``sample_orders``."""


@dataclass
class SystemOptions(demo.Options):
    down_seconds: float = 10.0
    """How long the one host stays down and the one state account stops answering."""
    outage_at: float = 0.2
    """Share of every expected delivery processed when both outages begin."""
    documents: bool = True
    """``loyalty`` as blob documents in ``orders``' state account and ``shipping`` in Cosmos
    DB (``shared.sample.stores``); False: both on Table Storage."""


COSMOS_APP = "shipping"
"""The app whose endpoint keeps its rows in Cosmos DB (a system's app keeps them in one
database at most: ``orders`` has its PostgreSQL database, so the Cosmos DB endpoint is
``shipping``'s); ``loyalty``, ``orders``' other endpoint, keeps its as blob documents."""


@dataclass
class Figures:
    """One app's part of the outcome."""

    processed: int = 0
    """Messages with an audit row in the app's endpoints."""
    sent_out: int = 0
    """Messages its handlers sent or published to another app's endpoints."""
    received: int = 0
    """Messages from another app it processed."""
    parked: int = 0
    cleanup_bad_origin: int = 0
    cleanup_other_app: int = 0


@dataclass
class SystemApp:
    """One app of the system as the demo runs it: its worker (provisioning, cleanup and the
    checks, on the same accounts as its host), its host process and what happened to it."""

    name: str
    worker: Worker
    host: HostProcess
    outcome_log: Path
    state: Azurite | None = None
    """Its state emulator (None: its rows are in PostgreSQL)."""
    rows_server: subprocess.Popen[str] | None = None
    """The server its rows are on when that is not its state emulator (the local Cosmos DB
    server): what its state outage stops."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while its host is down, so that its own kill does not restart it early."""
    host_down_seconds: float = 0.0
    state_down_seconds: float = 0.0
    figures: Figures = field(default_factory=Figures)

    def endpoints(self) -> list[str]:
        return list(self.worker.resources.endpoints)

    def outcomes(self) -> Counter[str]:
        return demo.read_outcomes(self.outcome_log)


def app_environ(
    name: str,
    messaging: str,
    state: str | None,
    postgres_url: str | None,
    provider: Provider,
    outcome_log: Path,
    options: SystemOptions,
    cosmos: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What the app's host is started with: its app, its name, both connections, its faults;
    ``cosmos``: the settings of its Cosmos DB account (``demo.cosmos_settings``)."""
    environ = {
        **demo.inherited_environ(),
        DEFAULT_SETTING: messaging,
        APP_SETTING: f"{SYSTEM_MODULE}:{name}",
        APP_NAME.name: name,
        "CLEANUP_SCHEDULE": os.environ.get("CLEANUP_SCHEDULE", "0 */5 * * * *"),
        "BUS_HOST_FUNCTION_KEY": demo.FUNCTION_KEY,
        OUTCOME_LOG_SETTING: str(outcome_log),
        DUPLICATE_RATE: str(options.duplicate_rate),
        CRASH_RATE: str(options.crash_rate),
        SEED: str(options.seed + sorted(DELIVERIES).index(name)),
        SESSION_RESEND.name: demo.RESEND_SECONDS,
    }
    if state is not None:
        environ |= {STATE_STORAGE_SETTING_NAME: STATE_CONNECTION, STATE_CONNECTION: state}
    if postgres_url is not None:
        environ |= {URL_SETTING: postgres_url}
    if name == "payments":
        environ |= provider.app_settings()
    return environ | dict(cosmos or {})


def expected_deliveries(app: str, options: SystemOptions) -> int:
    return DELIVERIES[app] * options.orders


async def kill_and_restart(app: SystemApp, options: SystemOptions) -> None:
    """Today's fault, per app: SIGKILL once ``kill_at`` of its deliveries are processed, then
    started again at once."""
    if options.kill_at <= 0:
        return
    wanted = options.kill_at * expected_deliveries(app.name, options)
    deadline = time.monotonic() + options.timeout
    while demo.processed_so_far(app.outcome_log) < wanted:
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.25)
    async with app.lock:
        app.host.kill()
        print(f"  {app.name}: host killed with SIGKILL, restarting it")
        await asyncio.to_thread(app.host.start)


def processed_everywhere(apps: Mapping[str, SystemApp]) -> int:
    return sum(demo.processed_so_far(a.outcome_log) for a in apps.values())


async def outages(apps: Mapping[str, SystemApp], options: SystemOptions) -> None:
    """Once ``outage_at`` of every delivery is processed: one app's host killed and kept down,
    one app's state emulator frozen, both for ``down_seconds``."""
    if options.down_seconds <= 0:
        return
    wanted = options.outage_at * sum(expected_deliveries(a, options) for a in apps)
    deadline = time.monotonic() + options.timeout
    while processed_everywhere(apps) < wanted:
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.25)
    await asyncio.gather(
        host_outage(apps[HOST_DOWN], options), state_outage(apps[STATE_DOWN], options)
    )


async def host_outage(app: SystemApp, options: SystemOptions) -> None:
    async with app.lock:
        app.host.kill()
        started = time.monotonic()
        print(f"  {app.name}: host killed with SIGKILL, down for {options.down_seconds:.0f}s")
        await asyncio.sleep(options.down_seconds)
        await asyncio.to_thread(app.host.start)
        app.host_down_seconds += time.monotonic() - started
        print(f"  {app.name}: host started again")


async def state_outage(app: SystemApp, options: SystemOptions) -> None:
    """The server of the app's rows frozen: its Cosmos DB server when it has one, else its
    state emulator."""
    process = app.rows_server or (None if app.state is None else app.state.process)
    if process is None:
        return
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGSTOP)
    print(f"  {app.name}: state storage stopped (SIGSTOP) for {options.down_seconds:.0f}s")
    try:
        await asyncio.sleep(options.down_seconds)
    finally:
        os.killpg(process.pid, signal.SIGCONT)
    app.state_down_seconds += time.monotonic() - started
    print(f"  {app.name}: state storage answering again")


async def quiescent(
    account: StorageAccount, queues: list[str], sessions: demo.SessionWatch, deadline: float
) -> bool:
    """Every endpoint queue of every app empty and no session of ``orders`` waiting for its
    signals, twice in a row."""
    calm = 0
    while time.monotonic() < deadline:
        waiting = sum([await account.queue(q).approximate_count() for q in queues])
        waiting = waiting or await sessions.waiting()
        calm = calm + 1 if waiting == 0 else 0
        if calm == 2:
            return True
        await asyncio.sleep(0.5)
    return False


@dataclass
class SystemVerdict:
    sent: int = 0
    processed: int = 0
    lost: int = 0
    ghosts: int = 0
    doubled: int = 0
    residue: int = 0
    cross_app: int = 0
    charges: int = 0
    refunds: int = 0
    web_orders: int = 0
    """Orders accepted at ``POST /api/orders``, each in one transactional session."""
    errors: list[str] = field(default_factory=list)
    apps: dict[str, Figures] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.ghosts or self.doubled or self.residue or self.errors)

    def line(self) -> str:
        return (
            f"demo: apps={len(self.apps)} sent={self.sent} processed={self.processed} "
            f"cross_app={self.cross_app} lost={self.lost} doubled={self.doubled} "
            f"ghosts={self.ghosts} residue={self.residue} charges={self.charges} "
            f"refunds={self.refunds} web_orders={self.web_orders} "
            f"verdict={'PASS' if self.passed else 'FAIL'}"
        )


async def endpoint_rows(app: SystemApp, prefix: str) -> dict[str, list[dict[str, object]]]:
    """Each of the app's endpoints' rows of one kind, from its state account's tables or the
    store the endpoint declares (``demo.stored_states``)."""
    account, sql = app.worker.state_account(), demo.stored_states(app.worker)
    return {e: await demo.rows(account, e, prefix, sql) for e in app.endpoints()}


def count_audits(
    audits: Mapping[str, Sequence[Mapping[str, object]]],
    owner: Mapping[str, str],
    roots: set[str],
    verdict: SystemVerdict,
) -> Counter[str]:
    """Each app's audit rows (``audits``, by app; ``owner``: each endpoint's app) against
    what was sent: the clients' messages (``roots``) and every message a row says its
    handler or its session caused. A message with no row is lost, one with two rows or
    caused twice is doubled, a row nobody sent is a ghost, and a message to another app's
    endpoint must have its row in that app. A session's row is no processing (nobody sent
    it): only what it caused counts. Returns the rows per message processed."""
    audited: Counter[str] = Counter()
    processed_by: dict[str, str] = {}
    caused: Counter[str] = Counter()
    crossing: dict[str, str] = {}
    for name, found in audits.items():
        for row in found:
            message = str(row["message_id"])
            if demo.processing(row):
                verdict.apps[name].processed += 1
                audited[message] += 1
                processed_by[message] = name
            for sent in json.loads(str(row["caused"])):
                caused[sent["id"]] += 1
                target = owner.get(str(sent.get("destination")), name)
                if target != name:
                    crossing[sent["id"]] = target
                    verdict.apps[name].sent_out += 1
    expected = roots | set(caused)
    verdict.sent, verdict.processed = len(expected), len(audited)
    verdict.lost = len(expected - set(audited))
    verdict.ghosts = len(set(audited) - expected)
    verdict.doubled = sum(1 for n in audited.values() if n > 1)
    verdict.doubled += sum(1 for n in caused.values() if n > 1)
    verdict.cross_app = len(crossing)
    for message, target in crossing.items():
        if processed_by.get(message, target) != target:
            verdict.errors.append(f"{message} for {target} was processed by another app")
        elif audited[message] == 1:
            verdict.apps[target].received += 1
    return audited


async def verify_system(
    apps: Mapping[str, SystemApp],
    clients: demo.Clients,
    orders: dict[str, int],
    pay_later: dict[str, int],
    databases: Mapping[str, str],
    provider: Provider,
) -> SystemVerdict:
    """Whole and per app, from each app's own store: the audit rows (``count_audits``), no
    outbox record left, the business state and the provider's ledger exact, and each order
    ``POST /api/orders`` accepted one row in ``orders``' ``sample_orders`` (no row for any
    other order) and its PlaceOrder processed once."""
    roots = {i for ids in clients.receipts.values() for i in ids}
    verdict = SystemVerdict(apps={name: a.figures for name, a in apps.items()})
    owner = {e: name for name, a in apps.items() for e in a.endpoints()}
    audits: dict[str, list[dict[str, object]]] = {}
    states: dict[str, dict[str, dict[str, object]]] = {}
    for name, app in apps.items():
        found = await endpoint_rows(app, AUDIT_PREFIX)
        audits[name] = [row for rows in found.values() for row in rows]
        outbox = await endpoint_rows(app, OUTBOX_PREFIX)
        verdict.residue += sum(len(r) for r in outbox.values())
        for endpoint, rows in (await endpoint_rows(app, STATE_ROW)).items():
            states[endpoint] = {str(r["pk"]): json.loads(str(r["data"])) for r in rows}
    audited = count_audits(audits, owner, roots, verdict)
    front = apps["orders"].worker
    committed = await demo.order_rows(
        front.state_account(), demo.stored_states(front), databases.get("orders")
    )
    verdict.errors += demo.web_order_errors(committed, clients, audited)
    orders = demo.placed_orders(orders, clients, committed)
    verdict.errors += demo.abandoned_errors(states, orders, clients)
    print(demo.abandoned_line(clients, committed))
    verdict.errors += demo.check_orders(states, orders)
    verdict.web_orders = len(clients.web_orders)
    postgres_url = databases.get("payments")
    charges = await demo.charge_rows(demo.stored_states(apps["payments"].worker), postgres_url)
    verdict.errors += [f"order {o} has {charges[o]} charge rows" for o in orders if charges[o] != 1]
    late_errors, ends = demo.check_pay_later(states, pay_later)
    verdict.errors += late_errors
    print(
        f"  pay-later orders: {ends['paid']} paid and shipped, {ends['cancelled']} "
        "cancelled by their timeout with the late payment refunded"
    )
    order_audits = [row for row in audits["orders"] if row.get("endpoint") == "orders"]
    deadline_errors, deadlines = demo.check_deadlines(order_audits, pay_later)
    verdict.errors += deadline_errors
    print(demo.deadline_line(deadlines))
    async with aiohttp.ClientSession() as session:
        ledger = await provider.ledger(session)
    checked = demo.ledger_check(ledger, states, orders, pay_later)
    verdict.errors += checked.errors
    verdict.charges, verdict.refunds = checked.charges, checked.refunds
    return verdict


async def start_apps(
    messaging: str,
    states: Mapping[str, Azurite],
    databases: Mapping[str, str],
    provider: Provider,
    options: SystemOptions,
    workdir: Path,
    cosmos: CosmosServer | None = None,
) -> dict[str, SystemApp]:
    """Each app provisioned in its accounts (and payments' database, shipping's Cosmos DB
    container), subscribed, and its host started."""
    apps = {}
    for name in DELIVERIES:
        on_cosmos = cosmos if name == COSMOS_APP else None
        state = states.get(name)
        log = workdir / f"{name}-outcomes.jsonl"
        connection = None if state is None or state.endpoints is None else state.endpoints
        environ = app_environ(
            name,
            messaging,
            None if connection is None else connection.connection_string,
            databases.get(name),
            provider,
            log,
            options,
            demo.cosmos_settings(on_cosmos),
        )
        settings = resolve_settings(environ=environ, local_file=None)
        worker = Worker.from_settings(settings, root=REPO_ROOT)
        separate = worker.state_account() if worker.separate_state else None
        report = await provision(worker.account(), worker.resources, state=separate)
        print(f"  {name}: {report.summary()}")
        await demo.provision_postgres(worker, databases.get(name))
        await demo.provision_cosmos(worker)
        await worker.bus().subscribe_all()
        host = HostProcess(
            REPO_ROOT / "function_app.py",
            environ,
            workdir / f"{name}-host.log",
            args=["--lease-seconds", str(options.lease_seconds)],
        )
        rows_server = None if on_cosmos is None else on_cosmos.process
        apps[name] = SystemApp(name, worker, host, log, state, rows_server)
    for app in apps.values():
        await asyncio.to_thread(app.host.start)
        print(f"  {app.name}: local host started on {app.host.url}")
    return apps


CLEANUP_ROUNDS = 3
"""Rounds of the three cleanups at most: a pass that storage does not answer in time leaves
its work for the next pass, as the timer's next run does in Azure."""


async def cleanups(
    apps: Mapping[str, SystemApp], account: StorageAccount, sessions: demo.SessionWatch
) -> int:
    """Every app's cleanup at once, again while a pass did not finish or tokens or payloads
    are left (at most ``CLEANUP_ROUNDS``); returns the rounds run. Another app's tokens and
    payloads are kept as ``other_app``, none may be ``bad_origin``."""
    for round_number in range(1, CLEANUP_ROUNDS + 1):
        swept = await asyncio.gather(*(a.worker.cleanup(grace_seconds=0) for a in apps.values()))
        for app, report in zip(apps.values(), swept, strict=True):
            sessions.add(report)
            kept: dict[str, int] = report["kept"]
            figures = app.figures
            figures.cleanup_bad_origin += sum(
                n for k, n in kept.items() if k.startswith("bad_origin")
            )
            figures.cleanup_other_app = max(figures.cleanup_other_app, kept.get("other_app", 0))
        finished = all(report["complete"] for report in swept)
        if finished and not await blobs_left(apps, account):
            return round_number
    return CLEANUP_ROUNDS


async def blobs_left(apps: Mapping[str, SystemApp], account: StorageAccount) -> int:
    """Tokens and payloads in the messaging account."""
    config = apps["orders"].worker.config
    left = 0
    for container in (config.tokens_container, config.payloads_container):
        left += len([p async for p in account.blob_container(container).list()])
    return left


async def drive_system(
    messaging: str,
    states: Mapping[str, Azurite],
    databases: Mapping[str, str],
    provider: Provider,
    options: SystemOptions,
    workdir: Path,
    cosmos: CosmosServer | None = None,
) -> SystemVerdict:
    apps = await start_apps(messaging, states, databases, provider, options, workdir, cosmos)
    orders_host = apps["orders"].host
    queues = [e for a in apps.values() for e in a.endpoints()]
    account = apps["orders"].worker.account()
    sessions = demo.SessionWatch(apps["orders"].worker)
    try:
        requests, orders, _ = demo.plan_requests(replace(options, shots=0))
        refused = demo.plan_refused(options, orders)
        placements, payments, pay_later = demo.plan_pay_later(options)
        half = len(payments) // 2
        started = time.monotonic()
        faults = [asyncio.create_task(kill_and_restart(a, options)) for a in apps.values()]
        faults.append(asyncio.create_task(outages(apps, options)))
        clients = demo.Clients()
        await demo.send_all(orders_host, requests + placements, options, clients)
        await demo.pay_all(provider, payments[:half], options)
        await demo.send_all(orders_host, payments[:half], options, clients)
        await demo.send_refused(orders_host, refused, options, clients)
        print(
            f"  clients: {len(clients.receipts)} messages accepted by orders in "
            f"{clients.requests} requests ({clients.repeats} repeated on purpose, "
            f"{clients.retries} retried after errors)"
        )
        print(demo.web_line(clients))
        deadline = time.monotonic() + options.timeout
        await asyncio.gather(*faults)
        calm = await quiescent(account, queues, sessions, deadline)
        await demo.pay_all(provider, payments[half:], options)
        await demo.send_all(orders_host, payments[half:], options, clients)
        calm = calm and await quiescent(account, queues, sessions, deadline)
        elapsed = time.monotonic() - started
        stopped = {a.name: await asyncio.to_thread(a.host.stop) for a in apps.values()}
        print(f"  queues {'empty' if calm else 'NOT EMPTY'} after {elapsed:.1f}s; hosts stopped")
        rounds = await cleanups(apps, account, sessions)
        print(f"  cleanups: {rounds} round(s) of the three apps' passes at once")
        verdict = await verify_system(apps, clients, orders, pay_later, databases, provider)
        await settle(apps, verdict, account)
        left = await sessions.counts()
    finally:
        for app in apps.values():
            app.host.kill()
            await app.worker.close()
    verdict.lost += len(clients.unsent)
    verdict.errors += [f"ingress key {k} answered with other ids" for k in clients.inconsistent]
    if not calm:
        verdict.errors.append("queues did not drain before the timeout")
    verdict.errors += [f"{n}: host stopped with exit code {c}" for n, c in stopped.items() if c]
    verdict.errors += demo.sessions_left_errors(left)
    print(demo.sessions_line(sessions, left))
    print_figures(apps, verdict)
    return verdict


async def settle(
    apps: Mapping[str, SystemApp], verdict: SystemVerdict, account: StorageAccount
) -> None:
    """After the cleanups: no token or payload left in the messaging account, no message
    parked in a poison queue, nothing reported as ``bad_origin``."""
    verdict.residue += await blobs_left(apps, account)
    for app in apps.values():
        for endpoint in app.endpoints():
            app.figures.parked += await account.queue(poison_queue(endpoint)).approximate_count()
        if app.figures.parked:
            verdict.errors.append(f"{app.name}: {app.figures.parked} messages in poison queues")
        if app.figures.cleanup_bad_origin:
            verdict.errors.append(
                f"{app.name}: its cleanup reported {app.figures.cleanup_bad_origin} bad_origin"
            )


def print_figures(apps: Mapping[str, SystemApp], verdict: SystemVerdict) -> None:
    columns = ("processed", "resumed", "duplicate", "retrying", "from_apps", "to_apps")
    more = ("parked", "starts", "host_down_s", "state_down_s", "other_app")
    print()
    print(f"  {'app':<10}" + "".join(f"{c:>13}" for c in (*columns, *more)))
    for app in apps.values():
        outcomes, f = app.outcomes(), app.figures
        values = [outcomes[Outcome.PROCESSED.value], outcomes[Outcome.RESUMED.value]]
        values += [outcomes[Outcome.DUPLICATE.value], outcomes[Outcome.RETRYING.value]]
        values += [f.received, f.sent_out, f.parked, app.host.starts]
        shown = [str(v) for v in values]
        shown += [f"{app.host_down_seconds:.1f}", f"{app.state_down_seconds:.1f}"]
        shown += [str(f.cleanup_other_app)]
        print(f"  {app.name:<10}" + "".join(f"{v:>13}" for v in shown))
    for error in verdict.errors[:10]:
        print(f"  ERROR: {error}")
    print()


def options_from(args: argparse.Namespace) -> SystemOptions:
    """The system demo's options from ``python -m lab.local.demo``'s arguments (``--shots``
    and ``--no-postgres`` are the single app's: the system has no shooting range, and
    payments keeps its rows in PostgreSQL)."""
    options = SystemOptions(
        orders=args.orders,
        duplicate_rate=args.duplicate_rate,
        crash_rate=args.crash_rate,
        kill_at=args.kill_at,
        seed=args.seed,
        provider_faults=args.provider_faults,
        documents=not args.no_documents,
    )
    if args.down_seconds is not None:
        options.down_seconds = args.down_seconds
    return options


def system_file(
    workdir: Path,
    messaging: str,
    states: Mapping[str, Azurite],
    databases: Mapping[str, str],
    provider: Provider,
    cosmos: CosmosServer | None = None,
) -> Path:
    """The system file of the demo's three apps (``shared.system``), each with the settings
    that reach its accounts, for the Spark audit: ``orders`` and ``payments`` are postgres
    apps (their database holds the storefront's sessions and payments' rows), ``shipping`` a
    cosmos app with ``cosmos`` (its rows in the local Cosmos DB server)."""
    apps = []
    for name in DELIVERIES:
        settings = {DEFAULT_SETTING: messaging}
        state = states.get(name)
        if state is not None and state.endpoints is not None:
            settings |= {
                STATE_STORAGE_SETTING_NAME: STATE_CONNECTION,
                STATE_CONNECTION: state.endpoints.connection_string,
            }
        if name in databases:
            settings |= {URL_SETTING: databases[name]}
        if name == "payments":
            settings |= provider.app_settings()
        store = "postgres" if name in databases else "table"
        if cosmos is not None and name == COSMOS_APP:
            store = "cosmos"
            settings |= demo.cosmos_settings(cosmos)
        bus_app = f"{SYSTEM_MODULE}:{name}"
        apps.append({"name": name, "busApp": bus_app, "store": store, "settings": settings})
    path = workdir / "system.json"
    path.write_text(json.dumps({"apps": apps}))
    return path


def run_system_audit(path: Path, workdir: Path) -> int | None:
    """The Spark audit over the whole system (``python -m shared.audit run --system``), in
    its own process (it starts a JVM); None when PySpark is not installed."""
    if importlib.util.find_spec("pyspark") is None:
        return None
    started = time.monotonic()
    env = {
        **demo.inherited_environ(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # Spark's workers need this venv's packages
        # Run from the work folder (no checkout's local.settings.json), imported from here.
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))),
    }
    command = [sys.executable, "-m", "shared.audit", "run", "--system", str(path)]
    command += ["--out", str(workdir / "audit"), "--master", "local[2]", "--splits", "2"]
    result = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    said = [x for x in result.stderr.splitlines() if ": read " in x]  # each app's rows read
    for line in [*said, *result.stdout.strip().splitlines()[-12:]]:
        if line.strip():
            print(f"  audit: {line.strip()}")
    if result.returncode != 0:
        for line in result.stderr.strip().splitlines()[-12:]:
            print(f"  audit: {line}")
    print(f"  spark audit: exit code {result.returncode} in {time.monotonic() - started:.0f}s")
    return result.returncode


async def demo_databases(url: str) -> dict[str, str]:
    """Each app's database on the demo's server (``DATABASES``), created where it is not the
    server's own, by app."""
    server, _ = url.rsplit("/", 1)
    connection = await asyncpg.connect(url)
    try:
        for name in set(DATABASES.values()) - {"postgres"}:
            await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    return {app: f"{server}/{name}" for app, name in DATABASES.items()}


def run(options: SystemOptions, *, keep: bool = False, audit: bool = True) -> int:
    """The whole system demo: its emulators, database and provider, then ``drive_system``."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bus-system-demo-"))
    os.environ[PAYMENTS_STORE] = "postgres"
    # Read when the sample system is imported, here and in the hosts and the audit.
    os.environ[STOREFRONT_STORE] = "postgres"
    os.environ[LOYALTY_STORE] = "blob" if options.documents else "table"
    os.environ[SHIPPING_STORE] = "cosmos" if options.documents else "table"
    print("demo: a system of three apps (orders, payments, shipping) over one messaging Azurite")
    with contextlib.ExitStack() as running:
        messaging = running.enter_context(Azurite(location=str(workdir / "messaging")))
        states = {}
        for name in ("orders", "shipping"):
            states[name] = Azurite(location=str(workdir / f"{name}-state"))
            running.enter_context(states[name])
        print(
            "demo: orders and shipping have a state account in an Azurite each; payments keeps "
            "its rows in PostgreSQL, and orders' storefront its sessions and orders in a "
            "database of its own"
        )
        server = running.enter_context(PostgresServer())
        databases = asyncio.run(demo_databases(server))
        cosmos = None
        if options.documents:
            print(
                "demo: loyalty keeps its rows as blob documents in orders' Azurite, shipping "
                "in Cosmos DB (the local server, on a free port)"
            )
            cosmos = CosmosServer()
            running.enter_context(cosmos)
        credential = secrets.token_urlsafe(24)
        faults = provider_args(options.provider_faults, options.provider_late_seconds, options.seed)
        url = running.enter_context(provider_process(workdir, credential=credential, args=faults))
        provider = Provider(url, credential)
        verdict = asyncio.run(
            drive_system(
                messaging.connection_string, states, databases, provider, options, workdir, cosmos
            )
        )
        if verdict.passed and audit:
            path = system_file(
                workdir, messaging.connection_string, states, databases, provider, cosmos
            )
            code = run_system_audit(path, workdir)
            if code is not None and code != 0:
                verdict.errors.append(f"the Spark audit of the system failed (exit code {code})")
    print(f"  total {time.monotonic() - started:.0f}s")
    if not keep and verdict.passed:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not verdict.passed:
        print(f"  hosts' output: {workdir}/<app>-host.log")
    print(verdict.line())
    return 0 if verdict.passed else 1
