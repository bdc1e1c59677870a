"""``python -m lab.bench.payload_shared``: one event of 1 MiB published to 50 subscribers on
Azurite, with its body shared (one payload blob, ``shared.bus.payloads``) and as before
(sharing switched off: ``shared_payload_min_chars`` above any envelope, so every token
carries the whole body), side by side in one run on one emulator.

For each it prints the blob bytes the publish wrote (tokens and payloads), the storage
requests and the bytes written and read until all 50 subscribers processed the event, and
the wall time from the publish's start until then (the hub's processing, then the
subscribers', ``--concurrency`` at a time, as parallel function instances would).

Requests and bytes are counted by a wrapper around the account (every request the bus
makes goes through it); the wall time is Azurite's on this machine: compare the two rows of
one run, never absolute times across runs (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pydantic import BaseModel

from lab.local.azurite import Azurite
from shared.bus import Bus, BusApp, BusConfig, Command, Event, HandlerContext
from shared.provisioning import provision
from shared.resources import resources_of
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.blob import Blob, BlobContainer
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer
from shared.stores.instrumented import InstrumentedAccount

MIB = 1024 * 1024


class Publish(Command):
    partition_by = "key"
    key: str


class Published(Event):
    partition_by = "key"
    key: str
    text: str


class Seen(BaseModel):
    count: int = 0


def bench_app(subscribers: int, body_bytes: int) -> BusApp:
    app = BusApp()
    hub = app.endpoint("benchhub", state=Seen)
    text = "x" * (body_bytes - 40)  # the rest of the body: its key and the JSON around it

    @hub.handles(Publish)
    def publish(ctx: HandlerContext[Seen], command: Publish) -> None:
        ctx.state.count += 1
        ctx.publish(Published(key=command.key, text=text))

    for n in range(subscribers):
        endpoint = app.endpoint(f"benchsub{n:03d}", state=Seen)

        @endpoint.handles(Published)
        def seen(ctx: HandlerContext[Seen], event: Published) -> None:
            ctx.state.count += 1

    return app


@dataclass
class Counts:
    written: int = 0
    """Bytes of blob content written (creates and uploads)."""
    read: int = 0
    """Bytes of blob content read."""
    read_from: Counter[str] = field(default_factory=Counter)
    """Bytes of blob content read, by container (tokens and payloads apart)."""


class CountingBytes(DelegatingAccount):
    """Counts the blob bytes written and read (the requests are counted by the
    ``InstrumentedAccount`` it wraps)."""

    def __init__(self, inner: StorageAccount, counts: Counts) -> None:
        super().__init__(inner)
        self.counts = counts

    def blob_container(self, name: str) -> BlobContainer:
        return _CountingBlobs(self.inner.blob_container(name), self.counts)


class _CountingBlobs(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, counts: Counts) -> None:
        super().__init__(inner)
        self.counts = counts

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        self.counts.written += len(data)
        return await super().create(name, data, metadata)

    async def upload(
        self,
        name: str,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
    ) -> str:
        self.counts.written += len(data)
        return await super().upload(name, data, metadata, etag=etag)

    async def read(self, name: str) -> Blob:
        blob = await super().read(name)
        self.counts.read += len(blob.data)
        self.counts.read_from[self.inner.name] += len(blob.data)
        return blob


@dataclass(frozen=True)
class Result:
    label: str
    publish_written: int
    publish_seconds: float
    requests: int
    written: int
    read: int
    seconds: float
    processed: int


@dataclass(frozen=True)
class Run:
    label: str
    min_chars: int
    """``shared_payload_min_chars``: 8192 shares the body; above any envelope, it never is."""
    suffix: str
    send_concurrency: int = 16
    """``BUS_SEND_CONCURRENCY``: 1 is how a publish created and signalled its tokens before
    this setting, one request after another."""


SHARED = Run("shared", 8192, "s")
INLINE = Run("inline", 2**31 - 1, "i")
BEFORE = Run("inline, one send at a time (before)", 2**31 - 1, "o", send_concurrency=1)
""":class:`INLINE` with the token creates and signals one at a time: the bus before this
issue's changes, both of them undone by settings."""


async def one_run(
    account: StorageAccount, run: Run, subscribers: int, body_bytes: int, concurrency: int
) -> Result:
    label, min_chars, suffix = run.label, run.min_chars, run.suffix
    app = bench_app(subscribers, body_bytes)
    config = BusConfig(
        tokens_container=f"tokens{suffix}",
        payloads_container=f"payloads{suffix}",
        topics_container=f"topics{suffix}",
        ingress_table=f"ingress{suffix}",
        max_payload_bytes=2 * body_bytes,
        shared_payload_min_chars=min_chars,
        send_concurrency=run.send_concurrency,
        topic_cache_seconds=3600.0,
    )
    await provision(
        account,
        resources_of(config, tuple(app.endpoints)),
    )
    setup = Bus(app, account, config)
    await setup.subscribe_all()
    await setup.client("bench").send(Publish(key="k"), to="benchhub", idempotency_key="p")
    counts = Counts()
    instrumented = InstrumentedAccount(account)
    bus = Bus(app, CountingBytes(instrumented, counts), config)
    started = time.perf_counter()
    await _drain(bus, account, "benchhub")
    publish_written, publish_seconds = counts.written, time.perf_counter() - started
    limit = asyncio.Semaphore(concurrency)

    async def subscriber(name: str) -> int:
        async with limit:
            return await _drain(bus, account, name)

    names = [n for n in app.endpoints if n != "benchhub"]
    processed = sum(await asyncio.gather(*(subscriber(n) for n in names)))
    seconds = time.perf_counter() - started
    for name in app.endpoints:  # the next run's endpoints are the same: start them empty
        await account.queue(name).clear()
    requests = instrumented.instrumentation.count
    return Result(
        label,
        publish_written,
        publish_seconds,
        requests,
        counts.written,
        counts.read,
        seconds,
        processed,
    )


async def _drain(bus: Bus, account: StorageAccount, endpoint: str) -> int:
    """Process what waits at ``endpoint`` (received through the bare account: the queue
    receive and delete are the host's, not the bus's); how many messages it took."""
    queue = account.queue(endpoint)
    taken = 0
    while messages := await queue.receive(32, visibility_timeout=300):
        for message in messages:
            await bus.receive(endpoint, message.content)
            await queue.delete(message.id, message.pop_receipt)
            taken += 1
    return taken


def show(results: list[Result]) -> str:
    lines = [
        "| body | publish wrote | publish time | requests | blob bytes written "
        "| blob bytes read | processed | wall time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {r.publish_written / MIB:.2f} MiB "
            f"| {r.publish_seconds:.2f} s | {r.requests} | {r.written / MIB:.2f} MiB "
            f"| {r.read / MIB:.2f} MiB | {r.processed} | {r.seconds:.2f} s |"
        )
    shared = [r for r in results if r.label not in (INLINE.label, BEFORE.label)]
    for baseline in (INLINE, BEFORE):
        others = [r for r in results if r.label == baseline.label]
        if others:
            lines.append(f"\nshared vs {baseline.label} (medians): {_ratios(shared, others)}")
    return "\n".join(lines)


def _ratios(shared: list[Result], others: list[Result]) -> str:
    def ratio(field: str) -> float:
        """The baseline's median over the shared one's."""
        other = statistics.median([getattr(r, field) for r in others])
        return float(other / statistics.median([getattr(r, field) for r in shared]))

    return (
        f"{ratio('publish_written'):.1f}x fewer bytes written by the publish, the publish "
        f"{ratio('publish_seconds'):.2f}x faster, all processed {ratio('seconds'):.2f}x "
        f"faster, {1 / ratio('requests'):.2f}x the requests"
    )


async def bench(
    subscribers: int, body_bytes: int, concurrency: int, rounds: int, shared: Run = SHARED
) -> list[Result]:
    """``rounds`` of the three runs on one emulator, their order rotating (the first run of
    an emulator pays its warm-up)."""
    results = []
    with Azurite() as endpoints:
        settings = StorageSettings(connection_string=endpoints.connection_string)
        async with AzureStorageAccount(settings) as account:
            for number in range(rounds):
                runs = (shared, INLINE, BEFORE)
                order = runs[number % 3 :] + runs[: number % 3]
                for run in order:
                    suffixed = replace(run, suffix=f"{run.suffix}{number}")
                    results.append(
                        await one_run(account, suffixed, subscribers, body_bytes, concurrency)
                    )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.payload_shared", description=__doc__)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--body-mib", type=float, default=1.0, help="e.g. 0.004 for 4 KiB")
    parser.add_argument("--concurrency", type=int, default=8, help="subscribers at a time")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three runs")
    parser.add_argument(
        "--share-below",
        action="store_true",
        help="share the body even when its envelope rides in the signal (the threshold at 0: "
        "what sharing small bodies would cost)",
    )
    args = parser.parse_args(argv)
    body = int(args.body_mib * MIB)
    shared = Run("shared below 8 KiB", 0, "b") if args.share_below else SHARED
    results = asyncio.run(bench(args.subscribers, body, args.concurrency, args.rounds, shared))
    print(show(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
