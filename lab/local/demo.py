"""``make demo``: the main job, against an embedded Azurite and PostgreSQL.

By default it runs the sample system, three apps in three hosts (``lab.local.system_demo``);
``--single`` runs the sample app alone in one host, as described here.

It starts the emulator on free ports and a private PostgreSQL server (``payments`` keeps its
state, outbox records and audit rows there, and writes each charge to the app's own table in
the same transaction, while the other endpoints talk to it through the same queues and
blobs), and the local Cosmos DB server: ``loyalty`` keeps its rows as blob documents and
``shipping`` in Cosmos DB (``shared.sample.stores``), the others in Table Storage, so every
store runs here. It provisions every resource of the sample app, and starts the local
Functions host (``python -m lab.host``, reading ``function_app.py``) as a separate process.
Clients then post about 275 orders and shots to the HTTP ingress (``POST /api/messages`` with
an Idempotency-Key; about 30% of requests are repeated, and every failed request is retried
with its key) which make about 1,000 deliveries through the sample app; every second order
paid at once goes to the sample's ``POST /api/orders`` instead, whose transactional session
commits the order's row (in ``sample_orders`` beside payments' rows in PostgreSQL, or an
entity of ``storefront``'s table with ``--no-postgres``) with its PlaceOrder; half of the
failed requests there are given up by their client (such an order must exist wholly or not at
all), and a few requests must be refused (a bad body, an order placed again under another
key). The
host
misbehaves on purpose: about 30% of its signals are sent twice, 1% of its storage and SQL
operations crash the invocation (queue-triggered and HTTP alike), and once 40% of the
deliveries are processed the whole host is killed with SIGKILL and started again, whether or
not the clients are still sending. Once every queue is empty and no session waits for its
signals (``SessionWatch``: with ``BUS_SESSION_RESEND_SECONDS`` at 5 s the demo runs the
cleanup, as the timer would, to send a stopped request's), the host is stopped gracefully,
one cleanup pass runs, and the outcome is checked from the business state, the charge rows,
the order rows and the audit rows, with no session left waiting or open. ``--no-postgres``
keeps ``payments`` and ``storefront`` on Table Storage, ``--no-documents`` ``loyalty`` and
``shipping``.

``payments`` charges and refunds through the local payment provider (``python -m
lab.provider``), run as its own process with its books in the work folder's ``ledger.json``
and its fault switches on (``--provider-faults``: that share of the calls each answers 503
before applying, drops the connection after applying, or answers only after the caller gave
up); the host finds it through ``BUS_SERVICE_PROVIDER_URL`` and ``_CREDENTIAL``. Customers
who pay later pay at that provider themselves before the payment is reported. The provider's
ledger is the evidence of what was charged (``lab.local.ledger_check``): every order charged
exactly once, nothing charged for an order not placed, every late payment refunded exactly
once.
The last line sums it up; the exit code is non-zero when anything was lost, duplicated or
made up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from lab.host.chaos import CRASH_RATE, DUPLICATE_RATE, SEED
from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, Azurite
from lab.local.cosmos import CosmosServer
from lab.local.ledger_check import LedgerCheck, check_ledger
from lab.local.outcome_log import OUTCOME_LOG_SETTING
from lab.local.payments import Provider, pay_at_provider, provider_args
from lab.local.postgres import PostgresServer
from lab.provider.book import Ledger
from lab.provider.process import provider_process
from shared.app_loader import APP_SETTING, load_app
from shared.app_settings import COSMOS_DATABASE, COSMOS_ENDPOINT, COSMOS_KEY, SESSION_RESEND
from shared.bus import BusApp, Outcome
from shared.bus.config import BusConfig
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW
from shared.bus.session_counts import SessionCounts, count_sessions
from shared.bus.session_records import SESSION_MODE
from shared.bus.state.base import EndpointState
from shared.bus.state.connection import URL_SETTING
from shared.clock import to_datetime
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.sample.charges import PAYMENTS_STORE, SAMPLE_SCHEMA
from shared.sample.storefront import ORDER_ROW, STOREFRONT, STOREFRONT_STORE
from shared.sample.stores import LOYALTY_STORE, SHIPPING_STORE
from shared.settings import DEFAULT_SETTING, StorageSettings, resolve_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

FUNCTION_KEY = "demo-function-key"
DEMO_APP = "shared.sample.app:app"
ORDERS_SELECT = "SELECT order_id FROM sample_orders"
RESEND_SECONDS = "5"
"""``BUS_SESSION_RESEND_SECONDS`` in the demo: a session left unsignalled is finished by the
cleanup within the run."""
"""The demo checks the sample app's business state, so it runs the sample whatever
``BUS_APP`` says."""
DELIVERIES_PER_ORDER = 8
"""PlaceOrder, OrderPlaced to loyalty and shipping, ChargePayment, its EffectRequest to the
performer, ChargeAnswered, ShipOrder, and OrderShipped, which completes the order's checkout
(a saga instance of ``orders``)."""
DELIVERIES_PER_SHOT = 2  # FireAt, then Hit or Missed to the leaderboard
INGRESS_PATH = "/api/messages"
ORDERS_PATH = "/api/orders"
"""The sample's own route: the order row and its PlaceOrder in one transactional session."""


@dataclass
class Options:
    orders: int = 150
    shots: int = 125
    duplicate_rate: float = 0.3
    crash_rate: float = 0.01
    kill_at: float = 0.4
    """Fraction of the expected deliveries processed when the host is killed (0: no kill)."""
    lease_seconds: float = 4.0
    concurrency: int = 8
    seed: int = 2026
    timeout: float = 600.0
    web_every: int = 2
    """Every n-th order is placed through ``POST /api/orders`` (a session of ``storefront``)
    instead of the ingress (0: none)."""
    refused_orders: int = 5
    give_up_rate: float = 0.5
    """Share of the failed ``POST /api/orders`` requests (a 5xx or no answer) whose client gives
    up instead of retrying: its order must then exist wholly (its row, its PlaceOrder
    processed once, sent by the cleanup if the request stopped after its commit) or not at
    all."""
    """Requests to ``POST /api/orders`` that must be refused and write nothing, of each kind:
    a bad body, and an order placed again under another key."""
    pay_later_orders: int = 20
    """Orders paid later (the sample's payment timeout): half get their payment right after
    the other requests, half only once the queues are empty (every timeout fired)."""
    pay_window_seconds: int = 5
    provider_faults: float = 0.03
    """Share of the provider's calls that each fault hits: a 503 before applying, a dropped
    connection after applying, an answer held past the caller's timeout."""
    provider_late_seconds: float = 12.0
    """How long a late answer waits: past any call timeout the performer may use (a
    service's default is 10 s, and the performer stays below the queue's lease)."""


@dataclass
class Request:
    key: str
    payload: dict[str, Any]
    path: str = INGRESS_PATH
    """The ingress, or the sample's ``POST /api/orders`` (``ORDERS_PATH``), whose body is the
    order itself."""


@dataclass
class Clients:
    """What the HTTP clients saw."""

    receipts: dict[str, list[str]] = field(default_factory=dict)
    requests: int = 0
    retries: int = 0
    repeats: int = 0
    inconsistent: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)
    web_orders: dict[str, list[str]] = field(default_factory=dict)
    """Orders accepted at ``POST /api/orders``, by order id: the message ids answered."""
    web: Counter[str] = field(default_factory=Counter)
    """``POST /api/orders``'s share: its requests, repeats and retries."""
    refused: dict[str, int] = field(default_factory=dict)
    """Requests meant to be refused, by key: the status each was answered."""
    abandoned: set[str] = field(default_factory=set)
    """Orders whose client gave up at ``POST /api/orders`` after a failure, never answered."""

    def count(self, request: Request, what: str) -> None:
        """One more request, repeat or retry (``what``), in the totals and by its path."""
        setattr(self, what, getattr(self, what) + 1)
        if request.path == ORDERS_PATH:
            self.web[what] += 1


@dataclass
class Verdict:
    sent: int
    processed: int
    duplicates_suppressed: int
    lost: int
    ghosts: int
    residue: int
    state_errors: list[str]
    charges: int = 0
    """From the provider's ledger: charges and refunds applied, faults it injected."""
    refunds: int = 0
    provider_faults: int = 0

    @property
    def passed(self) -> bool:
        return (
            self.lost == 0
            and self.ghosts == 0
            and self.residue == 0
            and not self.state_errors
            and self.processed == self.sent
        )

    def line(self) -> str:
        return (
            f"demo: sent={self.sent} processed={self.processed} "
            f"duplicates_suppressed={self.duplicates_suppressed} lost={self.lost} "
            f"ghosts={self.ghosts} residue={self.residue} charges={self.charges} "
            f"refunds={self.refunds} provider_faults={self.provider_faults} "
            f"verdict={'PASS' if self.passed else 'FAIL'}"
        )


def demo_app() -> BusApp:
    return load_app(DEMO_APP)


def demo_endpoints() -> list[str]:
    """The sample's endpoints, and the performer the product adds for its declared services:
    its queue must drain and its audit rows count like any endpoint's."""
    app = demo_app()
    wanted = app.services and PERFORMER_ENDPOINT not in app.endpoints
    return [*app.endpoints, *([PERFORMER_ENDPOINT] if wanted else [])]


def plan_requests(options: Options) -> tuple[list[Request], dict[str, int], Counter[str]]:
    """The client requests (orders and shots interleaved), the order amounts and the shots
    per game they must lead to."""
    chooser = random.Random(options.seed)
    orders: dict[str, int] = {}
    shots: Counter[str] = Counter()
    order_requests, shot_requests = [], []
    for i in range(options.orders):
        order_id, amount = f"order{i}", 100 * chooser.randint(1, 50)
        orders[order_id] = amount
        body = {"order_id": order_id, "customer": f"cust{i % 20}", "amount_cents": amount}
        if options.web_every and i % options.web_every == 0:
            order_requests.append(Request(order_id, body, ORDERS_PATH))
            continue
        order_requests.append(
            Request(order_id, {"type": "PlaceOrder", "to": "orders", "body": body})
        )
    for i in range(options.shots):
        game = f"game{i % 10}"
        shots[game] += 1
        body = {"game_id": game, "position": chooser.randint(0, 9)}
        shot_requests.append(Request(f"shot{i}", {"type": "FireAt", "body": body}))
    mixed = order_requests + shot_requests
    chooser.shuffle(mixed)
    return mixed, orders, shots


async def answer(
    session: aiohttp.ClientSession,
    host: HostProcess,
    request: Request,
    clients: Clients,
    deadline: float,
    gives_up: Callable[[], bool] | None = None,
) -> tuple[int, Any] | None:
    """POST until the host answers below 500: a dead or restarting host, a crash inside the
    function (500) or storage trouble (503) are retried with the same Idempotency-Key,
    unless ``gives_up`` says the client leaves it there (the key then in
    ``clients.abandoned``). Returns the status and the JSON body (None: the deadline passed
    first, or the client gave up)."""
    delay = 0.1
    while time.monotonic() < deadline:
        clients.count(request, "requests")
        try:
            async with session.post(
                f"{host.url}{request.path}",
                json=request.payload,
                headers={"Idempotency-Key": request.key, "x-functions-key": FUNCTION_KEY},
            ) as response:
                if response.status < 500:
                    return response.status, await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        if gives_up is not None and gives_up():
            clients.abandoned.add(request.key)
            return None
        clients.count(request, "retries")
        await asyncio.sleep(delay)
        delay = min(2.0, delay * 2)
    return None


async def post(
    session: aiohttp.ClientSession,
    host: HostProcess,
    request: Request,
    clients: Clients,
    deadline: float,
    gives_up: Callable[[], bool] | None = None,
) -> list[str] | None:
    """The message ids the ingress (or ``POST /api/orders``) answers with 200/202."""
    answered = await answer(session, host, request, clients, deadline, gives_up)
    if answered is None:
        return None
    status, body = answered
    if status not in (200, 202):
        raise RuntimeError(f"{request.key}: HTTP {status} {body}")
    return [str(i) for i in body["message_ids"]]


def plan_refused(options: Options, orders: Mapping[str, int]) -> list[Request]:
    """Requests to ``POST /api/orders`` that must write and send nothing: bodies the route
    refuses (400) for orders never placed, and orders placed through it already, sent again
    under another key (409: a client that lost its key, or an attacker)."""
    web = [o for i, o in enumerate(orders) if options.web_every and i % options.web_every == 0]
    refused = []
    for i in range(min(options.refused_orders, len(web))):
        bad = {"order_id": f"refused{i}", "customer": f"cust{i}", "amount_cents": -100 * i}
        bad |= [{}, {"amount_cents": "100"}, {"coupon": "FREE"}][i % 3]
        refused.append(Request(f"refused{i}", bad, ORDERS_PATH))
        order_id = web[i]
        again = {"order_id": order_id, "customer": "mallory", "amount_cents": 1}
        refused.append(Request(f"again-{order_id}", again, ORDERS_PATH))
    return refused


async def send_refused(
    host: HostProcess, requests: list[Request], options: Options, clients: Clients
) -> None:
    """Each request of ``plan_refused``, once answered below 500: its status recorded. An
    order sent again under another key is skipped when its own client gave up on it: it may
    never have committed, and the second request would then place it (rightly) instead of
    being refused."""
    deadline = time.monotonic() + options.timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for request in requests:
            if request.key.removeprefix("again-") in clients.abandoned:
                continue
            answered = await answer(session, host, request, clients, deadline)
            clients.refused[request.key] = 0 if answered is None else answered[0]


def refused_errors(clients: Clients) -> list[str]:
    """A refused request's expected answer: 400 for a bad body, 409 for an order placed
    under another key."""
    errors = []
    for key, status in clients.refused.items():
        wanted = 409 if key.startswith("again-") else 400
        if status != wanted:
            errors.append(f"POST {ORDERS_PATH} {key} was answered {status}, not {wanted}")
    return errors


def plan_pay_later(options: Options) -> tuple[list[Request], list[Request], dict[str, int]]:
    """Orders that wait for a payment from outside: their placements, their payments (the
    first half sent right after the placements, the second half once every timeout has
    fired) and their amounts."""
    chooser = random.Random(options.seed + 2)
    placements, payments, amounts = [], [], {}
    for i in range(options.pay_later_orders):
        order_id, amount = f"later{i}", 100 * chooser.randint(1, 50)
        amounts[order_id] = amount
        body = {
            "order_id": order_id,
            "customer": f"latecust{i % 5}",
            "amount_cents": amount,
            "pay_within_seconds": options.pay_window_seconds,
        }
        placements.append(Request(order_id, {"type": "PlaceOrder", "to": "orders", "body": body}))
        paid = {"order_id": order_id, "payment_id": f"pay-{order_id}", "amount_cents": amount}
        payments.append(Request(f"pay-{order_id}", {"type": "PaymentReceived", "body": paid}))
    return placements, payments, amounts


async def pay_all(provider: Provider, payments: list[Request], options: Options) -> None:
    """Customers pay for these pay-later orders at the provider before the payments are
    reported: each report carries the provider's charge id."""
    deadline = time.monotonic() + options.timeout
    async with aiohttp.ClientSession() as session:
        paid = [pay_at_provider(session, provider, p.payload["body"], deadline) for p in payments]
        await asyncio.gather(*paid)


def checkout_over(states: Mapping[str, Mapping[str, Any]], order_id: str) -> bool:
    """Whether the order's checkout, its saga instance of ``orders``, has completed."""
    return bool(states["orders"].get(order_id, {}).get("completed_at"))


def check_pay_later(
    states: Mapping[str, Mapping[str, Any]], amounts: Mapping[str, int]
) -> tuple[list[str], Counter[str]]:
    """Each order paid later ends paid and shipped, or cancelled with its payment refunded
    exactly once (which one depends on whether its payment beat its timeout), and either way
    its checkout completed."""
    errors, ends = [], Counter[str]()
    for order_id, amount in amounts.items():
        refunded = states["payments"].get(order_id, {}).get("refunded_cents", 0)
        shipped = bool(states["shipping"].get(order_id, {}).get("shipment_id"))
        if not checkout_over(states, order_id):
            errors.append(f"the checkout of {order_id} is still open after its payment window")
        if shipped and not refunded:
            ends["paid"] += 1
        elif not shipped and refunded == amount:
            ends["cancelled"] += 1
        else:
            errors.append(f"{order_id} ended shipped={shipped} with {refunded} refunded")
    return errors, ends


def check_deadlines(
    audit_rows: Iterable[Mapping[str, object]], amounts: Mapping[str, int]
) -> tuple[list[str], Counter[str]]:
    """Each pay-later order's payment deadline (the PaymentDue its checkout requested) ended
    exactly once: cancelled by its payment, or fired (cancelling the order, or finding it paid
    when its cancel lost the race). By the deadlines' audit rows in ``orders``."""
    outcomes: dict[str, list[str]] = {order: [] for order in amounts}
    for row in audit_rows:
        order = str(row.get("pk", ""))
        if row.get("message_type") == "PaymentDue" and order in outcomes:
            outcome = str(row.get("outcome") or "processed")
            outcomes[order].append("cancelled" if outcome == "cancelled" else "fired")
    errors = [
        f"the deadline of {order} ended {len(ends)} times ({ends})"
        for order, ends in outcomes.items()
        if len(ends) != 1
    ]
    return errors, Counter(end for ends in outcomes.values() for end in ends)


def deadline_line(ends: Counter[str]) -> str:
    return (
        f"  payment deadlines: {ends['cancelled']} cancelled by their payment, "
        f"{ends['fired']} fired, each exactly once"
    )


async def send_all(
    host: HostProcess, requests: list[Request], options: Options, clients: Clients
) -> None:
    chooser = random.Random(options.seed + 1)
    deadline = time.monotonic() + options.timeout
    pending = asyncio.Queue[Request]()
    for request in requests:
        pending.put_nowait(request)

    def gives_up() -> bool:
        return chooser.random() < options.give_up_rate

    async def client(session: aiohttp.ClientSession) -> None:
        while not pending.empty():
            request = pending.get_nowait()
            web = request.path == ORDERS_PATH
            ids = await post(session, host, request, clients, deadline, gives_up if web else None)
            if ids is None:
                if request.key not in clients.abandoned:
                    clients.unsent.append(request.key)
                continue
            clients.receipts[request.key] = ids
            if request.path == ORDERS_PATH:
                clients.web_orders[str(request.payload["order_id"])] = ids
            if chooser.random() < options.duplicate_rate:
                # The client did not see the answer and sends again: same key, same ids.
                clients.count(request, "repeats")
                again = await post(session, host, request, clients, deadline)
                if again is not None and again != ids:
                    clients.inconsistent.append(request.key)

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(options.concurrency)))


def read_outcomes(path: Path) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                outcomes[str(json.loads(line)["outcome"])] += 1
    return outcomes


def processed_so_far(path: Path) -> int:
    """Cheap count of committed deliveries, polled while the host runs."""
    if not path.exists():
        return 0
    return path.read_bytes().count(f'"outcome": "{Outcome.PROCESSED.value}"'.encode())


async def kill_midway(
    host: HostProcess, outcome_log: Path, options: Options, sent: asyncio.Event
) -> float | None:
    """SIGKILL the host once the given share of deliveries is processed, then restart it.
    Returns when the kill happened (seconds into the run), and whether the clients were still
    sending: a kill in the middle of an ingress request leaves at worst a token no ingress
    record lists, which the final cleanup removes, while the client's retry with the same
    key is answered exactly once."""
    if options.kill_at <= 0:
        return None
    expected = options.orders * DELIVERIES_PER_ORDER + options.shots * DELIVERIES_PER_SHOT
    started = time.monotonic()
    while processed_so_far(outcome_log) < options.kill_at * expected:
        if time.monotonic() - started > options.timeout:
            return None
        await asyncio.sleep(0.25)
    host.kill()
    killed_at = time.monotonic() - started
    during = "after the clients finished" if sent.is_set() else "while the clients were sending"
    print(f"  host killed with SIGKILL after {killed_at:.1f}s, {during}; restarting it")
    await asyncio.to_thread(host.start)
    return killed_at


async def quiescent(
    account: StorageAccount, deadline: float, sessions: SessionWatch | None = None
) -> bool:
    """Every endpoint queue empty and no session of ``sessions`` waiting for its signals,
    twice in a row (counts include leased messages)."""
    calm = 0
    while time.monotonic() < deadline:
        waiting = sum([await account.queue(e).approximate_count() for e in demo_endpoints()])
        if sessions is not None:
            waiting = waiting or await sessions.waiting()
        calm = calm + 1 if waiting == 0 else 0
        if calm == 2:
            return True
        await asyncio.sleep(0.5)
    return False


def stored_states(worker: Worker) -> dict[str, EndpointState]:
    """The rows of the worker's endpoints that are not in their table (PostgreSQL, blob
    documents, Cosmos DB), by endpoint, read through the store each declares."""
    declared = {e.name: e.store for e in worker.app.endpoints.values()}
    return {
        name: EndpointState(rows)
        for name, rows in worker.endpoint_rows().items()
        if declared.get(name, "table") != "table"
    }


async def rows(
    account: StorageAccount, table: str, prefix: str, sql: Mapping[str, EndpointState]
) -> list[dict[str, object]]:
    """The endpoint's rows of one kind, from its table or, for an endpoint in ``sql``
    (``stored_states``), from the store it declares."""
    store = sql.get(table)
    if store is None:
        return [
            {"pk": e.partition_key, **e.properties}
            async for e in account.table(table).query_all(row_key_prefix=prefix)
        ]
    if prefix == AUDIT_PREFIX:
        return [{"pk": e.partition_key, **e.properties} async for e in store.audit_entities()]
    if prefix == OUTBOX_PREFIX:
        return [{"pk": r.partition_key} async for r in store.outbox_records()]
    return [{"pk": s.partition_key, "data": s.data} async for s in store.states()]


async def charge_rows(sql: Mapping[str, EndpointState], url: str | None) -> Counter[str]:
    """Rows per order in the sample's own ``sample_charges`` table (PostgreSQL only)."""
    if "payments" not in sql or url is None:
        return Counter()
    connection = await asyncpg.connect(url)
    try:
        found = await connection.fetch("SELECT order_id FROM sample_charges")
    finally:
        await connection.close()
    return Counter(str(r["order_id"]) for r in found)


async def order_rows(
    account: StorageAccount, sql: Mapping[str, EndpointState], url: str | None
) -> Counter[str]:
    """Rows per order that ``POST /api/orders`` committed: the sample's own ``sample_orders``
    table when ``storefront`` keeps its rows in PostgreSQL (``url``: that database), else the
    order entities of its table."""
    if STOREFRONT not in sql or url is None:
        found = await rows(account, STOREFRONT, ORDER_ROW, {})
        return Counter(str(r["pk"]) for r in found)
    connection = await asyncpg.connect(url)
    try:
        return Counter(str(r["order_id"]) for r in await connection.fetch(ORDERS_SELECT))
    finally:
        await connection.close()


def web_order_errors(
    committed: Counter[str], clients: Clients, audited: Mapping[str, int]
) -> list[str]:
    """Every order ``POST /api/orders`` accepted has one row and its PlaceOrder processed
    once; no other order has a row (one placed through the ingress, or refused), but one
    whose client gave up may (its session committed: ``placed_orders`` then holds it to the
    whole flow)."""
    errors = []
    for order_id, ids in clients.web_orders.items():
        if committed[order_id] != 1:
            errors.append(
                f"order {order_id} accepted at {ORDERS_PATH} has {committed[order_id]} rows"
            )
        errors += [
            f"PlaceOrder {i} of {order_id} processed {audited.get(i, 0)} times"
            for i in ids
            if audited.get(i, 0) != 1
        ]
    errors += [
        f"order {o} has a row but was never accepted at {ORDERS_PATH}"
        for o in committed
        if o not in clients.web_orders and o not in clients.abandoned
    ]
    return errors + refused_errors(clients)


def placed_orders(
    orders: Mapping[str, int], clients: Clients, committed: Counter[str]
) -> dict[str, int]:
    """The orders the flow must have carried through: all but those whose client gave up at
    ``POST /api/orders`` before their session committed (no row: nothing may be sent,
    charged or shipped for them, which the checks of the placed orders then catch)."""
    return {o: a for o, a in orders.items() if o not in clients.abandoned or committed[o]}


def abandoned_line(clients: Clients, committed: Counter[str]) -> str:
    done = sum(1 for o in clients.abandoned if committed[o])
    return (
        f"  {ORDERS_PATH}: {len(clients.abandoned)} orders given up by their client after a "
        f"failure: {done} had committed (row and PlaceOrder, carried through), "
        f"{len(clients.abandoned) - done} had not (nothing of them anywhere)"
    )


def abandoned_errors(
    states: Mapping[str, Mapping[str, Any]], placed: Mapping[str, int], clients: Clients
) -> list[str]:
    """An order given up before its commit has no state in any endpoint."""
    gone = clients.abandoned - set(placed)
    return [
        f"order {o} never committed but {e} has its state"
        for o in sorted(gone)
        for e, found in states.items()
        if o in found
    ]


def processing(row: Mapping[str, object]) -> bool:
    """Whether an audit row records a message processed: a session's row (mode ``session``)
    records what a request sent, its ``caused``, and nobody sent the session itself."""
    return row.get("mode") != SESSION_MODE


@dataclass
class SessionWatch:
    """The app's transactional sessions while the demo waits for the queues: a session its
    request left unsignalled (stopped between its commit and its signals) holds messages no
    queue shows yet. ``waiting`` counts them and, once one has waited past
    ``BUS_SESSION_RESEND_SECONDS``, runs the app's cleanup as its timer would (its sessions
    task sends their signals); ``signalled`` sums what those passes and the final cleanups
    signalled, ``retired_open`` the open sessions they deleted (requests that never
    committed: refused, or crashed and not retried under their key)."""

    worker: Worker
    signalled: int = 0
    retired_open: int = 0

    def endpoints(self) -> list[str]:
        return [name for name, e in self.worker.app.endpoints.items() if e.sessions]

    async def counts(self) -> SessionCounts:
        """Every session endpoint's sessions, summed."""
        total = SessionCounts()
        for endpoint in self.endpoints():
            found = await count_sessions(self.worker.endpoint_rows()[endpoint])
            total = SessionCounts(
                waiting=total.waiting + found.waiting,
                open=total.open + found.open,
                finished=total.finished + found.finished,
                unreadable=total.unreadable + found.unreadable,
                oldest_waiting_since=min(
                    filter(None, (total.oldest_waiting_since, found.oldest_waiting_since)),
                    default=None,
                ),
            )
        return total

    async def waiting(self) -> int:
        counts = await self.counts()
        since = counts.oldest_waiting_since
        resend = timedelta(seconds=self.worker.config.session_resend_seconds)
        if since is not None and since + resend < to_datetime(self.worker.config.clock()):
            self.add(await self.worker.cleanup())
        return counts.waiting

    def add(self, report: Mapping[str, Any]) -> None:
        self.signalled += int(report["changed"].get("sessions_signalled", 0))
        self.retired_open += int(report["removed"].get("open_sessions", 0))


def web_line(clients: Clients) -> str:
    """What went through ``POST /api/orders``: the orders placed in sessions and the
    requests it took."""
    web = clients.web
    return (
        f"  {ORDERS_PATH}: {len(clients.web_orders)} orders placed in transactional sessions, "
        f"in {web['requests']} requests ({web['repeats']} repeated on purpose, "
        f"{web['retries']} retried after errors, {len(clients.refused)} to be refused)"
    )


def sessions_line(watch: SessionWatch, left: SessionCounts) -> str:
    return (
        f"  sessions: {watch.signalled} signalled by the cleanup (their request stopped before "
        f"its signals), {watch.retired_open} open ones retired by it (never committed); after "
        f"the cleanups {left.waiting} waiting, {left.open} open, {left.finished} finished"
    )


def sessions_left_errors(left: SessionCounts) -> list[str]:
    """After the cleanups, every session finished: none waits for its signals, none is open
    (the cleanup with no grace retired those never committed), none unreadable."""
    errors = []
    if left.waiting:
        errors.append(f"{left.waiting} sessions still wait for their signals")
    if left.open:
        errors.append(f"{left.open} sessions are still open")
    if left.unreadable:
        errors.append(f"{left.unreadable} session records are unreadable")
    return errors


def check_orders(states: Mapping[str, Mapping[str, Any]], orders: Mapping[str, int]) -> list[str]:
    """Each order charged its amount and shipped, its checkout completed, each customer's
    loyalty and pick list counting their orders."""
    errors = []
    for order_id, amount in orders.items():
        if states["payments"].get(order_id, {}).get("amount_cents") != amount:
            errors.append(f"payment of {order_id} is not exactly {amount}")
        if not states["shipping"].get(order_id, {}).get("shipment_id"):
            errors.append(f"order {order_id} was not shipped")
        if not checkout_over(states, order_id):
            errors.append(f"the checkout of {order_id} did not complete")
    customers = Counter(f"cust{int(o[5:]) % 20}" for o in orders)
    for customer, count in customers.items():
        if states["loyalty"].get(customer, {}).get("orders") != count:
            errors.append(f"loyalty of {customer} is not {count} orders")
        if len(states["shipping"].get(customer, {}).get("pick_list", [])) != count:
            errors.append(f"pick list of {customer} does not hold {count} orders")
    return errors


async def verify(
    account: StorageAccount,
    roots: set[str],
    orders: dict[str, int],
    shots: Counter[str],
    suppressed: int,
    config: BusConfig,
    sql: Mapping[str, EndpointState] | None = None,
    postgres_url: str | None = None,
    pay_later: Mapping[str, int] | None = None,
    ledger: Ledger | None = None,
    clients: Clients | None = None,
) -> Verdict:
    """The invariants, from storage alone: every message sent (the clients' and every one a
    handler caused) has exactly one audit row, the business state is exact, nothing is left.
    ``sql``: the rows of the endpoints kept outside their tables (``stored_states``), those in
    PostgreSQL in the database of ``postgres_url``.
    ``pay_later``: the amounts of the orders paid later (``check_pay_later``). ``ledger``:
    the payment provider's, checked against the orders (``check_ledger``). ``clients``: what
    they placed through ``POST /api/orders`` (``web_order_errors``)."""
    sql = sql or {}
    pay_later = pay_later or {}
    endpoints = demo_endpoints()
    audited: Counter[str] = Counter()
    expected = set(roots)
    outbox_left = 0
    order_audits: list[Mapping[str, object]] = []
    for endpoint in endpoints:
        for row in await rows(account, endpoint, AUDIT_PREFIX, sql):
            if endpoint == "orders":
                order_audits.append(row)
            if processing(row):
                audited[str(row["message_id"])] += 1
            expected |= {c["id"] for c in json.loads(str(row["caused"]))}
        outbox_left += len(await rows(account, endpoint, OUTBOX_PREFIX, sql))

    states = {
        e: {
            str(r["pk"]): json.loads(str(r["data"])) for r in await rows(account, e, STATE_ROW, sql)
        }
        for e in endpoints
    }
    errors = []
    if clients is not None:
        committed = await order_rows(account, sql, postgres_url)
        errors += web_order_errors(committed, clients, audited)
        orders = placed_orders(orders, clients, committed)
        errors += abandoned_errors(states, orders, clients)
        print(abandoned_line(clients, committed))
    charges = await charge_rows(sql, postgres_url)
    if charges:
        errors += [f"order {o} has {charges[o]} charge rows" for o in orders if charges[o] != 1]
        errors += [f"charge row for unknown order {o}" for o in charges if o not in orders]
    errors += check_orders(states, orders)
    for game, count in shots.items():
        score = states["leaderboard"].get(game, {})
        if score.get("hits", 0) + score.get("misses", 0) != count:
            errors.append(f"leaderboard of {game} does not count {count} shots")
        if states["shootingrange"].get(game, {}).get("shots") != count:
            errors.append(f"range of {game} did not take {count} shots")
    errors += [f"{m} was processed {n} times" for m, n in audited.items() if n > 1]
    if pay_later:
        late_errors, ends = check_pay_later(states, pay_later)
        errors += late_errors
        print(
            f"  pay-later orders: {ends['paid']} paid and shipped, {ends['cancelled']} "
            "cancelled by their timeout with the late payment refunded"
        )
        deadline_errors, deadlines = check_deadlines(order_audits, pay_later)
        errors += deadline_errors
        print(deadline_line(deadlines))
    checked = ledger_check(ledger, states, orders, pay_later)
    errors += checked.errors
    # Tokens and shared payloads: after the cleanup pass neither may be left.
    blobs_left = 0
    for container in (config.tokens_container, config.payloads_container):
        blobs_left += len([p async for p in account.blob_container(container).list()])
    return Verdict(
        sent=len(expected),
        processed=len(audited),
        duplicates_suppressed=suppressed,
        lost=len(expected - set(audited)),
        ghosts=len(set(audited) - expected),
        residue=blobs_left + outbox_left,
        state_errors=errors,
        charges=checked.charges,
        refunds=checked.refunds,
        provider_faults=checked.faults,
    )


def ledger_check(
    ledger: Ledger | None,
    states: Mapping[str, Mapping[str, Any]],
    orders: Mapping[str, int],
    pay_later: Mapping[str, int],
) -> LedgerCheck:
    """The provider's ledger against the orders: each charged once (those paid later by the
    customer), and the late payments of the orders their timeout cancelled refunded once."""
    if ledger is None:
        return LedgerCheck(charges=0, refunds=0, faults=0)
    cancelled = {
        order: amount
        for order, amount in pay_later.items()
        if not states["shipping"].get(order, {}).get("shipment_id")
    }
    return check_ledger(ledger, {**orders, **pay_later}, cancelled)


def inherited_environ() -> dict[str, str]:
    """This process's environment for the demo's children, less any storage connection of
    the user's shell: beside the demo's own emulator it would make the connection ambiguous."""
    return {
        name: value
        for name, value in os.environ.items()
        if name != DEFAULT_SETTING and not name.startswith(f"{DEFAULT_SETTING}__")
    }


def outside_tables() -> list[str]:
    """The sample's endpoints that keep their rows outside Table Storage (PostgreSQL, blob
    documents, Cosmos DB): the Spark audit reads only tables, so their rows are exported."""
    return [e.name for e in demo_app().endpoints.values() if e.store != "table"]


def run_audit(
    connection_string: str,
    workdir: Path,
    postgres_url: str | None,
    cosmos: Mapping[str, str] | None = None,
    provider: Provider | None = None,
) -> int | None:
    """The Spark audit (``python -m shared.audit run``) over the same storage, in its own
    process (it starts a JVM); None when PySpark is not installed. With endpoints outside
    Table Storage the audit rows are exported first (``export`` reads each endpoint's rows in
    the store it declares) and the export audited. ``cosmos``: the settings naming the Cosmos
    DB account of cosmos endpoints (``cosmos_settings``); ``provider``: the payment provider,
    whose settings an app that declares it needs to be loaded with a worker (the export
    opens the endpoints' stores through one)."""
    if importlib.util.find_spec("pyspark") is None:
        return None
    started = time.monotonic()
    env = {
        **inherited_environ(),
        DEFAULT_SETTING: connection_string,
        APP_SETTING: DEMO_APP,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # Spark's workers need this venv's packages
        # Run from the work folder, imported from here: the checkout's local.settings.json
        # would mix with this emulator's connection (an ambiguous connection, refused).
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))),
    }
    # The audit loads the app without the runtime, which adds the performer: named here, its
    # table's audit rows record the answers' sends (without them each answer is a ghost).
    endpoints = ["--endpoints", ",".join(demo_endpoints())]
    command = [sys.executable, "-m", "shared.audit", "run", "--out", str(workdir / "audit")]
    command += ["--master", "local[2]", "--splits", "2", "--quiet", *endpoints]
    if postgres_url is not None:
        env[URL_SETTING] = postgres_url
    env.update(cosmos or {})
    env.update({} if provider is None else provider.app_settings())
    if outside_tables():
        exported = workdir / "audit-export"
        export = [sys.executable, "-m", "shared.audit", "export", "--out", str(exported)]
        export += endpoints
        done = subprocess.run(
            [*export, "--quiet"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        print(f"  audit export: {done.stdout.strip() or done.stderr.strip()[-500:]}")
        if done.returncode != 0:
            return done.returncode
        command += ["--input", str(exported)]
    result = subprocess.run(
        command,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    for line in result.stdout.strip().splitlines()[-12:]:
        print(f"  audit: {line}")
    if result.returncode != 0:
        for line in result.stderr.strip().splitlines()[-12:]:
            print(f"  audit: {line}")
    print(f"  spark audit: exit code {result.returncode} in {time.monotonic() - started:.0f}s")
    return result.returncode


def cosmos_settings(server: CosmosServer | None) -> dict[str, str]:
    """The app settings that name the local Cosmos DB server's account (none without one)."""
    if server is None:
        return {}
    settings = server.settings()
    return {
        COSMOS_ENDPOINT.name: str(settings.endpoint),
        COSMOS_KEY.name: str(settings.key),
        COSMOS_DATABASE.name: settings.database,
    }


async def drive(
    connection_string: str,
    options: Options,
    workdir: Path,
    postgres_url: str | None,
    provider: Provider,
    cosmos: Mapping[str, str] | None = None,
) -> Verdict:
    """``cosmos``: the settings of the Cosmos DB account (``cosmos_settings``)."""
    outcome_log = workdir / "outcomes.jsonl"
    database = {} if postgres_url is None else {URL_SETTING: postgres_url}
    database |= cosmos or {}
    host = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **inherited_environ(),
            **database,
            DEFAULT_SETTING: connection_string,
            "CLEANUP_SCHEDULE": os.environ.get("CLEANUP_SCHEDULE", "0 */5 * * * *"),
            "BUS_HOST_FUNCTION_KEY": FUNCTION_KEY,
            APP_SETTING: DEMO_APP,
            **provider.app_settings(),
            OUTCOME_LOG_SETTING: str(outcome_log),
            DUPLICATE_RATE: str(options.duplicate_rate),
            CRASH_RATE: str(options.crash_rate),
            SEED: str(options.seed),
            SESSION_RESEND.name: RESEND_SECONDS,
        },
        workdir / "host.log",
        args=["--lease-seconds", str(options.lease_seconds)],
    )
    async with AzureStorageAccount(StorageSettings(connection_string)) as raw:
        resend = {SESSION_RESEND.name: RESEND_SECONDS}
        settings = resolve_settings(
            {APP_SETTING: DEMO_APP, **database, **provider.app_settings(), **resend},
            local_file=None,
        )
        worker = Worker(demo_app(), settings, raw)
        print(f"  {(await provision(raw, worker.resources)).summary()}")
        await provision_postgres(worker, postgres_url)
        await provision_cosmos(worker)
        await worker.bus().subscribe_all()
        requests, orders, shots = plan_requests(options)
        refused = plan_refused(options, orders)
        placements, payments, pay_later = plan_pay_later(options)
        half = len(payments) // 2
        sessions = SessionWatch(worker)
        started = time.monotonic()
        await asyncio.to_thread(host.start)
        print(
            f"  local host started on {host.url} (pid {host.process.pid if host.process else '?'})"
        )

        clients = Clients()
        sent = asyncio.Event()
        killer = asyncio.create_task(kill_midway(host, outcome_log, options, sent))
        await send_all(host, requests + placements, options, clients)
        await pay_all(provider, payments[:half], options)
        await send_all(host, payments[:half], options, clients)  # most in time
        await send_refused(host, refused, options, clients)
        sent.set()
        print(
            f"  clients: {len(clients.receipts)} messages accepted in {clients.requests} requests "
            f"({clients.repeats} repeated on purpose, {clients.retries} retried after errors)"
        )
        print(web_line(clients))
        deadline = time.monotonic() + options.timeout
        await killer
        calm = await quiescent(raw, deadline, sessions)
        # A hidden delayed signal counts as queued, so every timeout has fired by now: the
        # other half of the payments comes after the cancellations, to be refunded.
        await pay_all(provider, payments[half:], options)
        await send_all(host, payments[half:], options, clients)
        calm = calm and await quiescent(raw, deadline, sessions)
        elapsed = time.monotonic() - started
        stop_code = await asyncio.to_thread(host.stop)
        print(
            f"  queues {'empty' if calm else 'NOT EMPTY'} after {elapsed:.1f}s; host stopped "
            f"gracefully with exit code {stop_code} after {host.starts} starts"
        )
        swept = await worker.cleanup(grace_seconds=0)
        sessions.add(swept)
        left = await sessions.counts()
        poisoned = {
            e: await raw.queue(poison_queue(e)).approximate_count() for e in demo_endpoints()
        }
        outcomes = read_outcomes(outcome_log)
        suppressed = outcomes[Outcome.DUPLICATE.value] + outcomes[Outcome.RESUMED.value]
        roots = {i for ids in clients.receipts.values() for i in ids}
        sql = stored_states(worker)
        async with aiohttp.ClientSession() as session:
            ledger = await provider.ledger(session)
        verdict = await verify(
            raw,
            roots,
            orders,
            shots,
            suppressed,
            worker.config,
            sql,
            postgres_url,
            pay_later,
            ledger,
            clients,
        )
        await worker.close()

    verdict.lost += len(clients.unsent)
    verdict.state_errors += [
        f"ingress key {k} answered with other ids" for k in clients.inconsistent
    ]
    verdict.state_errors += [f"{n} messages in {q}-poison" for q, n in poisoned.items() if n]
    if not calm:
        verdict.state_errors.append("queues did not drain before the timeout")
    if stop_code != 0:
        verdict.state_errors.append(f"host did not stop gracefully (exit code {stop_code})")
    verdict.state_errors += sessions_left_errors(left)
    print(sessions_line(sessions, left))

    print()
    print(f"  {'host deliveries':<34}{'count':>8}")
    for outcome in Outcome:
        print(f"  {outcome.value:<34}{outcomes[outcome.value]:>8}")
    print(f"  {'host starts (1 + restarts)':<34}{host.starts:>8}")
    print(f"  {'messages in poison queues':<34}{sum(poisoned.values()):>8}")
    removed = swept["removed"]
    print(f"  {'outbox records retired':<34}{removed.get('outbox_records', 0):>8}")
    print(f"  {'processed tokens deleted (R7)':<34}{removed.get('incoming_tokens', 0):>8}")
    print(f"  {'abandoned tokens removed':<34}{removed.get('abandoned_tokens', 0):>8}")
    for error in verdict.state_errors[:10]:
        print(f"  ERROR: {error}")
    if not verdict.passed:
        print(f"  host output: {workdir / 'host.log'}")
    print()
    return verdict


async def provision_postgres(worker: Worker, url: str | None) -> None:
    """The bus schema (``bus provision`` does the same) and the sample's own table."""
    sql = worker.sql()
    if sql is None or url is None:
        return
    for line in await sql.migrate(worker.sql_endpoints()):
        print(f"  {line}")
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(SAMPLE_SCHEMA)
    finally:
        await connection.close()


async def provision_cosmos(worker: Worker) -> None:
    """The database and containers of the cosmos endpoints (``bus provision`` does the same)."""
    cosmos = worker.cosmos()
    if cosmos is not None:
        for line in await cosmos.provision(worker.cosmos_endpoints()):
            print(f"  {line}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab.local.demo",
        description="Exactly-once under duplicates and crashes, on an embedded Azurite: the "
        "sample system's three apps by default, the sample app alone with --single.",
    )
    d = Options()
    per_order = f"orders placed ({DELIVERIES_PER_ORDER} deliveries each)"
    p.add_argument("--orders", type=int, default=d.orders, help=per_order)
    p.add_argument(
        "--shots", type=int, default=d.shots, help="--single: shots fired (2 deliveries each)"
    )
    p.add_argument("--duplicate-rate", type=float, default=d.duplicate_rate)
    p.add_argument("--crash-rate", type=float, default=d.crash_rate, help="per storage operation")
    p.add_argument(
        "--kill-at", type=float, default=d.kill_at, help="share processed at the SIGKILL (0: none)"
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--provider-faults",
        type=float,
        default=d.provider_faults,
        help="share of the payment provider's calls hit by each of its faults (late answer, "
        "503, dropped connection)",
    )
    p.add_argument(
        "--single",
        action="store_true",
        help="the sample app alone in one host, with the shots and the Spark audit (the "
        "default is the sample system: three apps, lab.local.system_demo)",
    )
    p.add_argument(
        "--down-seconds",
        type=float,
        help="system: how long payments' host stays down and shipping's state storage "
        "stops answering, mid-run (default 10; 0: neither)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work folder (host log)")
    p.add_argument("--no-audit", action="store_true", help="skip the Spark audit")
    p.add_argument(
        "--no-postgres",
        action="store_true",
        help="--single: keep payments on Table Storage too (no PostgreSQL server)",
    )
    p.add_argument(
        "--no-documents",
        action="store_true",
        help="keep loyalty and shipping on Table Storage (no blob documents, no Cosmos DB server)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.single:
        # Imported here, not above: the system demo builds on this module's pieces.
        from lab.local import system_demo

        system = system_demo.options_from(args)
        return system_demo.run(system, keep=args.keep, audit=not args.no_audit)
    options = Options(
        orders=args.orders,
        shots=args.shots,
        duplicate_rate=args.duplicate_rate,
        crash_rate=args.crash_rate,
        kill_at=args.kill_at,
        seed=args.seed,
        provider_faults=args.provider_faults,
    )
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bus-demo-"))
    # Read when the sample app is imported, here and in the host and audit processes.
    os.environ[PAYMENTS_STORE] = "table" if args.no_postgres else "postgres"
    os.environ[STOREFRONT_STORE] = os.environ[PAYMENTS_STORE]
    os.environ[LOYALTY_STORE] = "table" if args.no_documents else "blob"
    os.environ[SHIPPING_STORE] = "table" if args.no_documents else "cosmos"
    print("demo: starting Azurite on free ports")
    with contextlib.ExitStack() as running:
        endpoints = running.enter_context(Azurite(location=str(workdir / "azurite")))
        postgres_url = None
        if not args.no_postgres:
            print("demo: starting PostgreSQL on a free port (payments keeps its state there)")
            postgres_url = running.enter_context(PostgresServer())
        cosmos_server = None
        if not args.no_documents:
            print("demo: starting the local Cosmos DB server on a free port (shipping's rows)")
            cosmos_server = CosmosServer()
            running.enter_context(cosmos_server)
        cosmos = cosmos_settings(cosmos_server)
        print("demo: starting the payment provider on a free port (its faults on)")
        credential = secrets.token_urlsafe(24)
        faults = provider_args(options.provider_faults, options.provider_late_seconds, options.seed)
        url = running.enter_context(provider_process(workdir, credential=credential, args=faults))
        provider = Provider(url, credential)
        verdict = asyncio.run(
            drive(endpoints.connection_string, options, workdir, postgres_url, provider, cosmos)
        )
        wanted = verdict.passed and not args.no_audit
        audit = (
            run_audit(endpoints.connection_string, workdir, postgres_url, cosmos, provider)
            if wanted
            else None
        )
    if audit is not None and audit != 0:
        verdict.state_errors.append(f"the Spark audit failed (exit code {audit})")
    print(f"  total {time.monotonic() - started:.0f}s")
    if not args.keep and verdict.passed:
        shutil.rmtree(workdir, ignore_errors=True)
    print(verdict.line())
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
