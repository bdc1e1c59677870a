"""``make demo``: the main job, against an embedded Azurite.

It starts the emulator on free ports, provisions every resource in ``infra/resources.json``,
and drives the sample app (orders and shooting range) with about 1,000 deliveries while the
transport misbehaves: about 30% of signals are sent twice, and workers crash at random
storage operations (the message then comes back when its lease runs out). Once every queue
is empty it checks the outcome from the business state and the audit rows, prints a table,
and ends with one summary line; it exits non-zero when anything was lost, duplicated or
made up.

After the queues drain, one outbox sweep runs; residue is what is left of tokens and outbox
records after it. Workers run in this process for now; a separate local host process killed
with SIGKILL mid-run is still to come.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from shared.bus import Bus, BusConfig, Outcome
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW
from shared.cleanup.sweep import sweep_endpoint
from shared.host.queue_worker import Handler, QueueSettings, QueueWorker
from shared.local.azurite import REPO_ROOT, Azurite
from shared.local.chaos import DuplicatingAccount
from shared.provisioning import provision
from shared.resources import load_resources
from shared.sample.app import FireAt, PlaceOrder
from shared.sample.app import app as sample_app
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import (
    Fault,
    FaultPlan,
    Instrumentation,
    InstrumentedAccount,
    Operation,
    SimulatedCrash,
)
from shared.stores.queue import QueueMessage


@dataclass
class Options:
    orders: int = 150
    shots: int = 125
    duplicate_rate: float = 0.3
    crash_rate: float = 0.01
    lease_seconds: float = 3.0
    seed: int = 2026


@dataclass
class Run:
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    crashes: int = 0
    failures: int = 0
    swept_records: int = 0
    swept_tokens: int = 0


def crash_plan(rate: float, seed: int) -> FaultPlan:
    """Crash before or after a random ``rate`` of storage operations, reproducibly."""
    chooser = random.Random(seed)

    def plan(operation: Operation) -> Fault | None:
        if chooser.random() < rate:
            return chooser.choice([Fault.CRASH_BEFORE, Fault.CRASH_AFTER])
        return None

    return plan


def workers(
    bus: Bus, processing: StorageAccount, options: Options, run: Run
) -> dict[str, QueueWorker]:
    """One queue worker per endpoint, with host.json's settings and the demo's short lease so
    that a crashed message comes back within seconds."""
    settings = replace(
        QueueSettings.from_host_json(REPO_ROOT / "host.json"), lease_seconds=options.lease_seconds
    )

    def handler(endpoint: str) -> Handler:
        async def handle(raw: str, dequeue_count: int) -> None:
            run.outcomes[await bus.receive(endpoint, raw, dequeue_count)] += 1

        return handle

    return {
        endpoint: QueueWorker(processing, endpoint, handler(endpoint), settings)
        for endpoint in sample_app.endpoints
    }


async def deliver(worker: QueueWorker, message: QueueMessage, run: Run) -> None:
    """One function invocation. A crash skips the acknowledgement and the message reappears
    after its lease, as on the real platform."""
    try:
        if not await worker.run_one(message):
            run.failures += 1
    except SimulatedCrash:
        run.crashes += 1


async def work(
    workers: dict[str, QueueWorker], transport: StorageAccount, options: Options, run: Run
) -> None:
    """Poll every endpoint queue until all of them are empty."""
    while True:
        busy = False
        for endpoint, worker in workers.items():
            batch = await transport.queue(endpoint).receive(
                16, visibility_timeout=options.lease_seconds
            )
            if batch:
                busy = True
                await asyncio.gather(*(deliver(worker, m, run) for m in batch))
        if busy:
            continue
        waiting = sum([await transport.queue(e).approximate_count() for e in workers])
        if waiting == 0:
            return
        await asyncio.sleep(0.2)  # crashed messages come back once their lease runs out


@dataclass
class Verdict:
    sent: int
    processed: int
    duplicates_suppressed: int
    lost: int
    ghosts: int
    residue: int
    state_errors: list[str]

    @property
    def passed(self) -> bool:
        return (
            self.lost == 0
            and self.ghosts == 0
            and self.residue == 0
            and not self.state_errors
            and self.processed == self.sent
        )


async def rows(account: StorageAccount, table: str, prefix: str) -> list[dict[str, object]]:
    return [
        {"pk": e.partition_key, **e.properties}
        async for e in account.table(table).query_all(row_key_prefix=prefix)
    ]


async def verify(
    account: StorageAccount,
    roots: set[str],
    orders: dict[str, int],
    shots: Counter[str],
    run: Run,
    tokens_container: str,
) -> Verdict:
    endpoints = list(sample_app.endpoints)
    audited: Counter[str] = Counter()
    expected = set(roots)
    outbox_left = 0
    for endpoint in endpoints:
        for row in await rows(account, endpoint, AUDIT_PREFIX):
            audited[str(row["message_id"])] += 1
            expected |= {c["id"] for c in json.loads(str(row["caused"]))}
        outbox_left += len(await rows(account, endpoint, OUTBOX_PREFIX))

    states = {
        e: {str(r["pk"]): json.loads(str(r["data"])) for r in await rows(account, e, STATE_ROW)}
        for e in endpoints
    }
    errors = []
    for order_id, amount in orders.items():
        if states["payments"].get(order_id, {}).get("amount_cents") != amount:
            errors.append(f"payment of {order_id} is not exactly {amount}")
    customers = Counter(f"cust{int(o[5:]) % 20}" for o in orders)
    for customer, count in customers.items():
        if states["loyalty"].get(customer, {}).get("orders") != count:
            errors.append(f"loyalty of {customer} is not {count} orders")
    for game, count in shots.items():
        score = states["leaderboard"].get(game, {})
        if score.get("hits", 0) + score.get("misses", 0) != count:
            errors.append(f"leaderboard of {game} does not count {count} shots")
        if states["shootingrange"].get(game, {}).get("shots") != count:
            errors.append(f"range of {game} did not take {count} shots")
    tokens_left = len([p async for p in account.blob_container(tokens_container).list()])
    suppressed = run.outcomes[Outcome.DUPLICATE] + run.outcomes[Outcome.RESUMED]
    return Verdict(
        sent=len(expected),
        processed=len(audited),
        duplicates_suppressed=suppressed,
        lost=len(expected - set(audited)),
        ghosts=len(set(audited) - expected),
        residue=tokens_left + outbox_left,
        state_errors=errors,
    )


async def drive(connection_string: str, options: Options) -> Verdict:
    resources = load_resources()
    config = BusConfig(
        tokens_container=resources.containers["tokens"],
        topics_container=resources.containers["topics"],
        ingress_table=resources.tables["ingress"],
    )
    async with AzureStorageAccount(StorageSettings(connection_string)) as raw:
        print(f"  {(await provision(raw, resources)).summary()}")
        transport = DuplicatingAccount(raw, options.duplicate_rate, options.seed)
        processing = InstrumentedAccount(
            transport, Instrumentation(plan=crash_plan(options.crash_rate, options.seed))
        )
        bus = Bus(sample_app, processing, config)
        await Bus(sample_app, raw, config).subscribe_all()
        client = Bus(sample_app, transport, config).client("demo")

        started = time.perf_counter()
        roots: set[str] = set()
        orders: dict[str, int] = {}
        shots: Counter[str] = Counter()
        chooser = random.Random(options.seed)
        for i in range(options.orders):
            order_id, amount = f"order{i}", 100 * chooser.randint(1, 50)
            receipt = await client.send(
                PlaceOrder(order_id=order_id, customer=f"cust{i % 20}", amount_cents=amount),
                to="orders",
                idempotency_key=order_id,
            )
            roots |= set(receipt.message_ids)
            orders[order_id] = amount
        for i in range(options.shots):
            game = f"game{i % 10}"
            receipt = await client.send(
                FireAt(game_id=game, position=chooser.randint(0, 9)),
                to="shootingrange",
                idempotency_key=f"shot{i}",
            )
            roots |= set(receipt.message_ids)
            shots[game] += 1
        print(
            f"  sent {len(roots)} client messages; {transport.duplicated} signals duplicated so far"
        )

        run = Run()
        await work(workers(bus, processing, options, run), transport, options, run)
        elapsed = time.perf_counter() - started
        # Every worker has stopped, so no create can still be in flight: one sweep with no
        # grace period must leave nothing behind (BoundedResidue).
        for endpoint in sample_app.endpoints:
            report = await sweep_endpoint(
                raw, endpoint, tokens_container=config.tokens_container, grace_seconds=0
            )
            run.swept_records += report.outbox_records_removed
            run.swept_tokens += report.abandoned_tokens_removed
        verdict = await verify(raw, roots, orders, shots, run, config.tokens_container)

    print(
        f"  processed in {elapsed:.1f}s; signals sent {transport.sent}, duplicated "
        f"{transport.duplicated} ({100 * transport.duplicated / max(transport.sent, 1):.0f}%); "
        f"worker crashes {run.crashes}; handler failures {run.failures}"
    )
    print()
    print(f"  {'outcome':<28}{'count':>8}")
    for outcome in Outcome:
        print(f"  {outcome.value:<28}{run.outcomes[outcome]:>8}")
    print(f"  {'outbox records swept':<28}{run.swept_records:>8}")
    print(f"  {'abandoned tokens swept':<28}{run.swept_tokens:>8}")
    for error in verdict.state_errors[:10]:
        print(f"  STATE ERROR: {error}")
    print()
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, default=Options.orders)
    parser.add_argument("--shots", type=int, default=Options.shots)
    parser.add_argument("--duplicate-rate", type=float, default=Options.duplicate_rate)
    parser.add_argument("--crash-rate", type=float, default=Options.crash_rate)
    parser.add_argument("--seed", type=int, default=Options.seed)
    args = parser.parse_args(argv)
    options = Options(
        orders=args.orders,
        shots=args.shots,
        duplicate_rate=args.duplicate_rate,
        crash_rate=args.crash_rate,
        seed=args.seed,
    )
    print("demo: starting Azurite on free ports")
    with Azurite() as endpoints:
        verdict = asyncio.run(drive(endpoints.connection_string, options))
    v = verdict
    print(
        f"demo: sent={v.sent} processed={v.processed} "
        f"duplicates_suppressed={v.duplicates_suppressed} lost={v.lost} ghosts={v.ghosts} "
        f"residue={v.residue} verdict={'PASS' if v.passed else 'FAIL'}"
    )
    return 0 if v.passed else 1


if __name__ == "__main__":
    sys.exit(main())
