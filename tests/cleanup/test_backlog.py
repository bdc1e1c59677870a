"""What a cleanup pass leaves waiting, measured at its end and recorded for the alerts: the
parked messages of each endpoint, the tokens in flight by sender and the age of the oldest,
and one more pass counted (docs/alerts.md). Read back through the OpenTelemetry SDK's
in-memory reader, on the in-memory stores and on Azurite.

A relay endpoint forwards to a stuck one whose handler always fails; the bus parks on the
first failure (``max_dequeue_count=1``). The clock then moves an hour on, so the tokens still
in flight are an hour old, except a delayed message's, which is not due yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric, NumberDataPoint

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.telemetry import DESTINATION, SENDER, BusTelemetry
from shared.cleanup.backlog import OUTSIDE, measure_backlog, tokens_in_flight
from shared.cleanup.now import cleanup_pass
from shared.cleanup.settings import CleanupSettings
from shared.clock import to_datetime
from shared.resources import poison_queue
from tests.bus.flow import Ledger
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name

HOUR = 3600.0


class Ping(Command):
    partition_by = "key"
    key: str


@dataclass
class Shifted:
    """The system clock, moved on by ``offset`` seconds: on Azurite a blob's last change is
    the emulator's time, so the bus's clock moves instead."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class Gauges:
    reader: InMemoryMetricReader

    def points(self, metric: str) -> dict[str, float]:
        """The value of ``metric`` by its one attribute's value."""
        found: dict[str, float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric_data in (m for m in scope.metrics if m.name == metric):
                    for point in metric_data.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        [value] = (point.attributes or {"": ""}).values()
                        found[str(value)] = point.value
        return found


def metric(record: Callable[[BusTelemetry], object]) -> Metric:
    """The one metric ``record`` makes with the bus's instruments, as the SDK exports it: its
    name and unit are what the alert queries must name."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    record(BusTelemetry(meter_provider=provider))
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    [found] = [m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
    return found


PARKED = metric(lambda t: t.parked.set(0)).name
IN_FLIGHT = metric(lambda t: t.tokens_in_flight.set(0)).name
OLDEST = metric(lambda t: t.oldest_token_age.set(0))
PASSES = metric(lambda t: t.cleanup_passes.add(1)).name


@pytest.fixture
def gauges() -> Iterator[tuple[Gauges, MeterProvider]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield Gauges(reader), provider
    provider.shutdown()


def relay_and_stuck(suffix: str) -> BusApp:
    app = BusApp()
    relay = app.endpoint(f"relay{suffix}", state=Ledger)
    stuck = app.endpoint(f"stuck{suffix}", state=Ledger)

    @relay.handles(Ping)
    def forward(ctx: HandlerContext[Ledger], ping: Ping) -> None:
        ctx.send(Ping(key=f"{ping.key}x"), to=stuck.name)

    @stuck.handles(Ping)
    def fail(ctx: HandlerContext[Ledger], ping: Ping) -> None:
        raise RuntimeError("provider down")

    return app


async def deliver_all(harness: Harness, endpoint: str) -> None:
    for message in await harness.raw.queue(endpoint).receive(32, visibility_timeout=30):
        await harness.deliver(endpoint, message)


async def pass_over(harness: Harness) -> dict[str, object]:
    return await cleanup_pass(
        harness.raw,
        harness.app,
        harness.config,
        CleanupSettings(checkpoint_table=unique_name("cleanup")),
        rows=harness.cleanup_rows(),
    )


async def test_one_pass_records_parked_messages_and_the_oldest_token_by_endpoint(
    backend: Backend, gauges: tuple[Gauges, MeterProvider]
) -> None:
    # Given: a message relayed to an endpoint that fails, two more sent to it straight from
    # HTTP, all three parked; one waiting at the relay, one delayed two days
    read, provider = gauges
    clock = Shifted()
    suffix = unique_name("")[:8]
    config: dict[str, object] = {"max_dequeue_count": 1, "meter_provider": provider}
    if backend.clock is None:
        config["clock"] = clock
    harness = await Harness.create(backend, relay_and_stuck(suffix), **config)
    relay, stuck = f"relay{suffix}", f"stuck{suffix}"
    http = harness.setup_bus.client("http")
    await http.send(Ping(key="a"), to=relay, idempotency_key="a")
    await deliver_all(harness, relay)
    for key in ("b", "c"):
        await http.send(Ping(key=key), to=stuck, idempotency_key=key)
    await deliver_all(harness, stuck)
    assert await harness.raw.queue(poison_queue(stuck)).approximate_count() == 3
    await http.send(Ping(key="d"), to=relay, idempotency_key="d")
    await http.send(Ping(key="e"), to=relay, idempotency_key="e", delay=timedelta(days=2))

    # When: an hour later, one cleanup pass
    if backend.clock is not None:
        backend.clock.advance(HOUR)
    clock.offset = HOUR
    report = await pass_over(harness)

    # Then: every endpoint and sender has its figure, zeros included, and one pass counted.
    # The three parked messages were claimed before their handler failed: received, so not
    # in flight (the parked figure counts them); a's token went with the pass (R7), its
    # output claimed. In flight: d, waiting at the relay, and e, delayed.
    assert read.points(PARKED) == {relay: 0, stuck: 3}
    assert read.points(IN_FLIGHT) == {relay: 0, stuck: 0, OUTSIDE: 2}
    ages = read.points(OLDEST.name)
    assert ages[stuck] == ages[relay] == 0  # nothing in flight
    assert HOUR <= ages[OUTSIDE] < HOUR + 120, ages  # d; e is not due, so not the oldest
    assert read.points(PASSES) == {"": 1}
    backlog = report["backlog"]
    assert isinstance(backlog, dict)
    assert backlog["parked"] == {relay: 0, stuck: 3}
    assert backlog["tokens_in_flight"] == {relay: 0, stuck: 0, OUTSIDE: 2}
    assert backlog["tokens_complete"] is True
    now = to_datetime(harness.config.clock())
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    listed = (await tokens_in_flight(tokens, now)).grouped([relay, stuck], OUTSIDE)
    assert {k: v.received for k, v in listed.items()} == {relay: 1, stuck: 0, OUTSIDE: 2}

    # When: the parked messages are gone and the waiting one processed, another pass
    await harness.raw.queue(poison_queue(stuck)).clear()
    await deliver_all(harness, relay)
    await pass_over(harness)

    # Then: the figures are the new pass's, not left over from the first
    assert read.points(PARKED) == {relay: 0, stuck: 0}
    assert read.points(IN_FLIGHT)[relay] == 1  # d's output, unconsumed (a's was received)
    assert read.points(PASSES) == {"": 2}


async def test_a_limit_on_the_listing_gives_lower_bounds_and_says_so(backend: Backend) -> None:
    harness = await Harness.create(backend, relay_and_stuck(unique_name("")[:8]))
    [relay, _] = harness.app.endpoints
    http = harness.setup_bus.client("http")
    for key in "abc":
        await http.send(Ping(key=key), to=relay, idempotency_key=key)
    now = to_datetime(harness.config.clock())
    tokens = harness.raw.blob_container(harness.config.tokens_container)

    listed = await tokens_in_flight(tokens, now, limit=2)
    assert (listed.total, listed.complete) == (2, False)
    assert (await tokens_in_flight(tokens, now)).total == 3
    measured = await measure_backlog(
        harness.raw, list(harness.app.endpoints), tokens.name, now, max_tokens=2
    )
    assert measured.tokens_complete is False
    assert measured.to_dict()["tokens_in_flight"][OUTSIDE] == 2
    nothing = await measure_backlog(harness.raw, [relay], tokens.name, now, max_tokens=0)
    assert nothing.tokens is None


async def test_a_delayed_message_is_in_flight_but_not_late_before_its_due_time(
    backend: Backend,
) -> None:
    clock = Shifted()
    config: dict[str, object] = {} if backend.clock is not None else {"clock": clock}
    harness = await Harness.create(backend, relay_and_stuck(unique_name("")[:8]), **config)
    [relay, stuck] = harness.app.endpoints
    http = harness.setup_bus.client("http")
    await http.send(Ping(key="later"), to=relay, idempotency_key="k", delay=timedelta(hours=2))

    async def outside_after(seconds: float) -> tuple[int, float]:
        if backend.clock is not None:
            backend.clock.advance(seconds - clock.offset)
        clock.offset = seconds
        now = to_datetime(harness.config.clock())
        measured = await measure_backlog(
            harness.raw, [relay, stuck], harness.config.tokens_container, now, max_tokens=10
        )
        assert measured.tokens is not None
        counted = measured.tokens[OUTSIDE]
        return counted.count, counted.age_seconds(now)

    assert await outside_after(HOUR) == (1, 0.0)  # due in an hour: not late
    count, age = await outside_after(3 * HOUR)  # due an hour ago: late by that hour
    assert count == 1
    assert HOUR - 5 <= age < HOUR + 120


async def test_names_nobody_expects_in_the_tokens_container_count_under_one_sender(
    backend: Backend, gauges: tuple[Gauges, MeterProvider]
) -> None:
    """Anyone who may write to the container may choose any name: the gauges' attributes stay
    the endpoints and ``OUTSIDE``, and the pass goes on."""
    read, provider = gauges
    harness = await Harness.create(
        backend, relay_and_stuck(unique_name("")[:8]), meter_provider=provider
    )
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    for name in ("zzz/not-a-token", "Évil <script> name/x", "a" * 300, "\u202erelay/x"):
        await tokens.create(name, b"{}")

    await pass_over(harness)

    assert set(read.points(IN_FLIGHT)) == {*harness.app.endpoints, OUTSIDE}
    assert read.points(IN_FLIGHT)[OUTSIDE] == 4
    assert set(read.points(PARKED)) == set(harness.app.endpoints)
    assert {DESTINATION, SENDER} == {"messaging.destination.name", "bus.sender"}
