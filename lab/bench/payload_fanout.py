"""``python -m lab.bench.payload_fanout``: how long one publish to many subscribers takes.

A hub endpoint handles one command by publishing one event that N endpoints subscribe to.
The run times the hub's invocation (its N token creates, the commit and its N signal sends,
what BUS_SEND_CONCURRENCY bounds) and then the time until every subscriber has processed
the event, with ``DRAIN_INVOCATIONS`` subscriber invocations at once (several Function
instances, each running a batch). A client's publish to the same N subscribers (the HTTP
ingress's path: N creates, the ingress record, N sends) is timed too. Each configuration is
run at several send concurrencies side by side, 1 being the behaviour before the setting.

Two backends: the in-memory store behind a fixed per-request latency (``--latency-ms``, 10 by
default, for Azure's round trips; ``shared.stores.latency``), with 1,000 subscribers; and
Azurite (a fresh emulator per run), with a few hundred, where the emulator's CPU is the
limit. Every subscriber must have processed the event exactly once, or the run fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel

from lab.local.azurite import Azurite
from shared.bus import Bus, BusApp, BusConfig, Command, Event, HandlerContext, Outcome
from shared.provisioning import provision
from shared.resources import resources_of
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.latency import LatencyAccount
from shared.stores.memory import MemoryStorageAccount

DRAIN_INVOCATIONS = 64
"""Subscriber invocations running at once while the event is processed."""


class Announce(Command):
    partition_by = "key"
    key: str


class Announced(Event):
    partition_by = "key"
    key: str


class Seen(BaseModel):
    count: int = 0


def fanout_app(suffix: str, subscribers: int) -> BusApp:
    app = BusApp()
    hub = app.endpoint(f"hub{suffix}", state=Seen)

    @hub.handles(Announce)
    def announce(ctx: HandlerContext[Seen], command: Announce) -> None:
        ctx.state.count += 1
        ctx.publish(Announced(key=command.key))

    for n in range(subscribers):
        subscriber = app.endpoint(f"sub{n:04d}{suffix}", state=Seen)

        @subscriber.handles(Announced)
        def seen(ctx: HandlerContext[Seen], event: Announced) -> None:
            ctx.state.count += 1

    return app


@dataclass(frozen=True)
class Timing:
    backend: str
    subscribers: int
    concurrency: int
    hub_seconds: float
    """The hub's invocation: creates, commit, sends."""
    all_seconds: float
    """From the hub's invocation until every subscriber has processed the event."""
    client_seconds: float
    """A client's publish to the same subscribers."""

    def line(self) -> str:
        return (
            f"{self.backend:<14} N={self.subscribers:<5} BUS_SEND_CONCURRENCY="
            f"{self.concurrency:<3} hub invocation {self.hub_seconds:6.2f} s, every "
            f"subscriber done {self.all_seconds:6.2f} s, client publish "
            f"{self.client_seconds:6.2f} s"
        )


async def timed_publish(
    backend: str, setup: StorageAccount, measured: StorageAccount, n: int, concurrency: int
) -> Timing:
    """One publish to ``n`` subscribers on fresh resources: ``setup`` prepares them (no
    latency), ``measured`` is what the functions and the client use."""
    suffix = uuid.uuid4().hex[:6]
    app = fanout_app(suffix, n)
    config = BusConfig(
        tokens_container=f"tokens{suffix}",
        topics_container=f"topics{suffix}",
        ingress_table=f"ingress{suffix}",
        send_concurrency=concurrency,
    )
    await provision(
        setup,
        resources_of(config, tuple(app.endpoints)),
    )
    await Bus(app, setup, config).subscribe_all()
    bus = Bus(app, measured, config)
    hub, subscribers = f"hub{suffix}", [e for e in app.endpoints if e.startswith("sub")]

    await (
        Bus(app, setup, config).client().send(Announce(key="k"), to=hub, idempotency_key="announce")
    )
    started = time.monotonic()
    await _invoke_once(bus, hub)
    hub_done = time.monotonic()
    outcomes = await _drain(bus, subscribers)
    all_done = time.monotonic()
    _check(outcomes, n, "the hub's publish")

    await bus.client().publish(Announced(key="k2"), idempotency_key="event")
    client_done = time.monotonic()
    _check(await _drain(bus, subscribers), n, "the client's publish")
    return Timing(
        backend, n, concurrency, hub_done - started, all_done - started, client_done - all_done
    )


async def _invoke_once(bus: Bus, endpoint: str) -> Outcome:
    queue = bus.account.queue(endpoint)
    [message] = await queue.receive(1, visibility_timeout=300)
    outcome = await bus.receive(endpoint, message.content, message.dequeue_count)
    await queue.delete(message.id, message.pop_receipt)
    return outcome


async def _drain(bus: Bus, endpoints: list[str]) -> Counter[Outcome]:
    """Each endpoint's one message, processed by at most ``DRAIN_INVOCATIONS`` at once."""
    limit = asyncio.Semaphore(DRAIN_INVOCATIONS)

    async def one(endpoint: str) -> Outcome:
        async with limit:
            return await _invoke_once(bus, endpoint)

    return Counter(await asyncio.gather(*(one(e) for e in endpoints)))


def _check(outcomes: Counter[Outcome], n: int, what: str) -> None:
    if outcomes != Counter({Outcome.PROCESSED: n}):
        raise RuntimeError(f"{what}: expected {n} subscribers processed once, got {outcomes}")


async def memory_run(n: int, concurrency: int, latency: float) -> Timing:
    memory = MemoryStorageAccount()
    slowed = LatencyAccount(memory, latency)
    return await timed_publish(f"memory+{latency * 1000:g}ms", memory, slowed, n, concurrency)


async def azurite_run(n: int, concurrency: int) -> Timing:
    with Azurite() as endpoints:
        settings = StorageSettings(connection_string=endpoints.connection_string)
        async with AzureStorageAccount(settings) as account:
            return await timed_publish("azurite", account, account, n, concurrency)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.payload_fanout", description=__doc__)
    p.add_argument(
        "--backend", choices=["memory", "azurite"], nargs="+", default=["memory", "azurite"]
    )
    p.add_argument("--memory-subscribers", type=int, default=1000)
    p.add_argument("--azurite-subscribers", type=int, default=300)
    p.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, BusConfig().send_concurrency],
        help="BUS_SEND_CONCURRENCY values, run side by side (default: 1 and the default)",
    )
    p.add_argument("--latency-ms", type=float, default=10.0)
    args = p.parse_args(argv)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for backend in args.backend:
        for concurrency in args.concurrency:
            if backend == "memory":
                run = memory_run(args.memory_subscribers, concurrency, args.latency_ms / 1000)
            else:
                run = azurite_run(args.azurite_subscribers, concurrency)
            print(asyncio.run(run).line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
