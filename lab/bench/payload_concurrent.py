"""``python -m lab.bench.payload_concurrent``: the working set of many large bodies at once
(issue 42, finding 4), with and without the worker's body budget (``shared.bus.budget``).

On Azurite, in this process, for bodies of ``--mib`` MiB (the bench's BUS_MAX_PAYLOAD_BYTES
is the body's size, so the default budget holds four of them):

- ``receive``: ``--concurrency`` commands wait in the large-body app's ``documents`` queue
  (``lab.bench.large_app``); all are received at once, as a worker running that many
  invocations of one queue would (host.json lets 24 run per instance);
- ``ingress``: as many ``POST /api/messages`` bodies are handled at once
  (``shared.http_ingress.handle``, the function's whole work after the host read the body).

Each runs twice in one process: without a budget (room for every body: the bus before
issue 42) and with the default budget. The figure is the peak of the memory Python
allocated during the step above what it held before (``tracemalloc``: storage lives in the
emulator, so what is counted is the worker's own), as a multiple of one body, with the
budget's own peak and the outcomes (a postponed message, a 503, comes again later).
Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lab.bench.large_app import StoreDocument, app
from lab.bench.payload_large import document
from lab.local.azurite import Azurite
from shared import http_ingress
from shared.bus import Bus, BusConfig
from shared.bus.config import BODY_BUDGETS
from shared.provisioning import provision
from shared.resources import resources_of
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

MIB = 1024 * 1024
UNBOUNDED = 1 << 40
"""A budget no run fills: the bus without one."""


@dataclass(frozen=True)
class Step:
    label: str
    body_bytes: int
    peak_bytes: int
    budget_peak: int
    budget_capacity: int
    outcomes: Counter[str]

    def report(self) -> str:
        budget = (
            "no budget"
            if self.budget_capacity >= UNBOUNDED
            else f"budget {self.budget_capacity / MIB:.0f} MiB, its peak "
            f"{self.budget_peak / MIB:.1f} MiB"
        )
        outcomes = ", ".join(f"{n} {o}" for o, n in sorted(self.outcomes.items()))
        return (
            f"{self.label}: peak {self.peak_bytes / MIB:.0f} MiB = "
            f"{self.peak_bytes / self.body_bytes:.1f}x the body ({budget}; {outcomes})"
        )


def config(suffix: str, body_bytes: int, budget: int) -> BusConfig:
    return BusConfig(
        tokens_container=f"tokens{suffix}",
        payloads_container=f"payloads{suffix}",
        topics_container=f"topics{suffix}",
        ingress_table=f"ingress{suffix}",
        max_payload_bytes=body_bytes,
        body_budget_bytes=budget,
    )


async def provisioned(account: StorageAccount, bus_config: BusConfig) -> None:
    await provision(
        account,
        resources_of(bus_config, tuple(app.endpoints)),
    )


async def clear(account: StorageAccount) -> None:
    for name in app.endpoints:
        await account.queue(name).clear()


def measured_from() -> int:
    """Start a measurement: the peak is reset, and what is held now is the baseline."""
    tracemalloc.reset_peak()
    return tracemalloc.get_traced_memory()[0]


async def receive_step(
    account: StorageAccount, label: str, bus_config: BusConfig, mib: float, concurrency: int
) -> Step:
    await clear(account)
    chars = int(mib * MIB) - 100
    client = Bus(app, account, bus_config).client("bench")
    for n in range(concurrency):
        command = StoreDocument(doc_id=f"doc-{label}-{n}", content="d" * chars)
        await client.send(command, to="documents", idempotency_key=f"{label}{n}")
    messages = await account.queue("documents").receive(32, visibility_timeout=300)
    bus = Bus(app, account, bus_config)
    before = measured_from()
    outcomes = await asyncio.gather(
        *(bus.receive("documents", m.content, m.dequeue_count) for m in messages)
    )
    peak = tracemalloc.get_traced_memory()[1] - before
    for message in messages:
        await account.queue("documents").delete(message.id, message.pop_receipt)
    return Step(
        f"receive {len(messages)} at once, {label}",
        int(mib * MIB),
        peak,
        bus.budget.peak,
        bus.budget.capacity,
        Counter(o.value for o in outcomes),
    )


async def ingress_step(
    account: StorageAccount, label: str, bus_config: BusConfig, mib: float, concurrency: int
) -> Step:
    await clear(account)
    chars = int(mib * MIB) - 200
    bus = Bus(app, account, bus_config)
    bodies = [
        json.dumps(document(f"http-{label}-{n}", chars) | {"to": "documents"}).encode()
        for n in range(concurrency)
    ]
    before = measured_from()
    answers = await asyncio.gather(
        *(
            http_ingress.handle(bus, {"Idempotency-Key": f"http-{label}-{n}"}, raw)
            for n, raw in enumerate(bodies)
        )
    )
    peak = tracemalloc.get_traced_memory()[1] - before
    return Step(
        f"ingress {concurrency} at once, {label}",
        int(mib * MIB),
        peak,
        bus.budget.peak,
        bus.budget.capacity,
        Counter(answered(a) for a in answers),
    )


def answered(answer: http_ingress.Answer) -> str:
    """A status, and for a 503 whether the instance was busy (budget or concurrency) or
    storage did not answer in time (a loaded machine)."""
    if answer.status != 503:
        return str(answer.status)
    return "503 busy" if str(answer.body.get("error", "")).startswith("busy") else "503 storage"


async def run(mib: float, concurrency: int, folder: Path) -> list[Step]:
    with Azurite(str(folder / "azurite")) as azurite:
        async with AzureStorageAccount(StorageSettings(azurite.connection_string)) as account:
            return await measured(account, mib, concurrency)


async def measured(
    account: StorageAccount, mib: float, concurrency: int, suffix: str = ""
) -> list[Step]:
    """Both steps without a budget, then with the default one, on ``account``; ``suffix``
    keeps the containers and keys of one run apart from another's on the same emulator."""
    body = int(mib * MIB)
    steps: list[Step] = []
    for label, budget in (("no budget", UNBOUNDED), ("default budget", 0)):
        bus_config = config(f"{'b' if budget else 'd'}{suffix}", body, budget)
        await provisioned(account, bus_config)
        steps.append(await receive_step(account, label, bus_config, mib, concurrency))
        steps.append(await ingress_step(account, label, bus_config, mib, concurrency))
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.bench.payload_concurrent", description=__doc__
    )
    parser.add_argument("--mib", type=float, default=4.0, help="body size (default 4 MiB)")
    parser.add_argument("--concurrency", type=int, default=16, help="bodies at once (default 16)")
    args = parser.parse_args(argv)
    tracemalloc.start()
    with tempfile.TemporaryDirectory(prefix="payload-concurrent-") as folder:
        steps = asyncio.run(run(args.mib, args.concurrency, Path(folder)))
    print(f"default budget: {BODY_BUDGETS} bodies of BUS_MAX_PAYLOAD_BYTES = {args.mib:g} MiB")
    for step in steps:
        print(step.report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
