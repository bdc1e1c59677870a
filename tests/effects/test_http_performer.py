"""The performer calling real HTTP servers through the receive pipeline (in-memory stores):
late answers, slow ones, forged requests, the credential kept out of every log line, poison
reason and span, and the call's span and metrics (``shared.effects.telemetry``)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shared.bus import BusApp, HandlerContext, RetryPolicy
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.clock import ManualClock
from shared.effects.addresses import Credential, ServiceAddress
from shared.effects.http import HttpClient, HttpProvider
from shared.effects.performer import add_performer
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend
from tests.effects.http_servers import (
    Conversation,
    KeyedProvider,
    RawServer,
    head,
    raw_server,
    read_request,
    serving,
)
from tests.effects.test_performer import ChargeAnswered, Order, PlaceOrder, forged_request

SECRET = "sk_live_never_shown_7f3a"
LIMIT = 1024


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, metric: str) -> list[tuple[dict[str, object], float]]:
        """(attributes, value or count) of every data point of ``metric``."""
        found: list[tuple[dict[str, object], float]] = []
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for named in (m for m in scope.metrics if m.name == metric):
                    for point in named.data.data_points:
                        if isinstance(point, HistogramDataPoint):
                            found.append((dict(point.attributes or {}), point.count))
                        elif isinstance(point, NumberDataPoint):
                            found.append((dict(point.attributes or {}), point.value))
        return found


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(spans, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@asynccontextmanager
async def orders_over_http(
    url: str, telemetry: Telemetry, *, call_timeout: float = 2.0, retry: RetryPolicy | None = None
) -> AsyncIterator[Harness]:
    """The orders app whose payments service is at ``url``, on fresh in-memory stores; a
    message is parked on its second delivery."""
    app = BusApp()
    orders = app.endpoint("orders", Order)

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        key = ctx.request_effect(
            service="payments",
            operation="charge",
            body={"amount": cmd.amount},
            answer=ChargeAnswered,
        )
        ctx.state.requested.append(key)

    @orders.handles(ChargeAnswered)
    def answered(ctx: HandlerContext[Order], answer: ChargeAnswered) -> None:
        ctx.state.answers.append((answer.key, answer.outcome))

    declared = app.service("payments", operations={"charge": "/v1/charges"})
    client = HttpClient()
    address = ServiceAddress(url, Credential(SECRET))
    provider = HttpProvider(declared, address, client, max_bytes=LIMIT)
    add_performer(app, {"payments": provider}, call_timeout=call_timeout, retry=retry)
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    harness = await Harness.create(
        backend,
        app,
        jitter=random.Random(7),
        max_dequeue_count=2,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    try:
        yield harness
    finally:
        await client.close()


async def place_order(harness: Harness) -> Order:
    await harness.setup_bus.client().send(
        PlaceOrder(order="o1", amount=1200), to="orders", idempotency_key="place-o1"
    )
    async with asyncio.timeout(30):
        await harness.run_until_quiet()
    return await harness.applied_state("orders", "o1", Order)


async def test_an_answer_sent_after_the_call_gave_up_is_the_one_the_retry_gets(
    telemetry: Telemetry,
) -> None:
    async with serving(KeyedProvider(answer_after=1.0)) as server:
        harness_of = orders_over_http(
            server.url, telemetry, call_timeout=0.3, retry=RetryPolicy(immediate=2)
        )
        async with harness_of as harness:
            order = await place_order(harness)
    [key] = order.requested
    assert server.ledger == [key]
    assert len(server.received) >= 2
    assert {r.headers["idempotency-key"] for r in server.received} == {key}
    assert order.answers == [(key, "succeeded")]


async def test_a_retry_answered_in_progress_is_retried_with_its_key_and_not_parked(
    telemetry: Telemetry,
) -> None:
    """Issue 42: the first call times out while the provider still works on it; the retry,
    under the same key, is answered 409 "in progress" twice. Each is an unknown outcome,
    retried with the same key: the charge applied once, the order answered, nothing parked."""
    async with serving(KeyedProvider(busy_until_refused=2)) as server:
        harness_of = orders_over_http(
            server.url, telemetry, call_timeout=0.3, retry=RetryPolicy(immediate=3)
        )
        async with harness_of as harness:
            order = await place_order(harness)
            parked = await harness.poison_messages(PERFORMER_ENDPOINT)
    [key] = order.requested
    assert parked == []
    assert server.ledger == [key]
    assert server.in_progress_answered == 2
    assert {r.headers["idempotency-key"] for r in server.received} == {key}
    assert order.answers == [(key, "succeeded")]


async def test_two_copies_of_one_request_at_once_apply_and_answer_once_and_park_nothing(
    telemetry: Telemetry,
) -> None:
    """Issue 42: two copies of the request's signal run at once. The first call is still
    running when the second arrives under its key and is answered 409 "in progress"; that copy
    is retried with the same key, not parked, and only one answer is processed."""
    async with serving(KeyedProvider(busy_until_refused=1)) as server:
        harness_of = orders_over_http(server.url, telemetry, retry=RetryPolicy(immediate=2))
        async with harness_of as harness:
            await harness.setup_bus.client().send(
                PlaceOrder(order="o1", amount=1200), to="orders", idempotency_key="place-o1"
            )
            [signal] = await harness.raw.queue("orders").receive(1, visibility_timeout=30)
            await harness.deliver("orders", signal)
            performer = harness.raw.queue(PERFORMER_ENDPOINT)
            [request] = await performer.peek(1)
            await performer.send(request.content)
            copies = await performer.receive(2, visibility_timeout=30)
            assert len(copies) == 2
            await asyncio.gather(*(harness.deliver(PERFORMER_ENDPOINT, c) for c in copies))
            async with asyncio.timeout(30):
                await harness.run_until_quiet()
            order = await harness.applied_state("orders", "o1", Order)
            parked = await harness.poison_messages(PERFORMER_ENDPOINT)
    [key] = order.requested
    assert parked == []
    assert server.ledger == [key]
    assert server.in_progress_answered == 1
    assert order.answers == [(key, "succeeded")]


def trickling(server: list[RawServer]) -> Conversation:
    async def conversation(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await server[0].write(writer, head("200 OK", "Content-Length: 1000") + b'{"id": ')
        while True:
            await asyncio.sleep(0.05)
            await server[0].write(writer, b" ")

    return conversation


async def test_a_trickling_answer_times_out_and_is_parked_after_the_retries(
    telemetry: Telemetry,
) -> None:
    holder: list[RawServer] = []
    async with raw_server(trickling(holder)) as server:
        holder.append(server)
        async with orders_over_http(server.url, telemetry, call_timeout=0.3) as harness:
            order = await place_order(harness)
            [parked] = await harness.poison_messages(PERFORMER_ENDPOINT)
    assert server.connections == 2
    poison = parked["poison"]
    assert isinstance(poison, dict)
    assert poison["reason"].startswith("ProviderUnavailable: effect ")
    assert poison["reason"].endswith("no answer in 0.3 s")
    assert order.answers == []


async def test_a_forged_request_naming_an_address_connects_nowhere(telemetry: Telemetry) -> None:
    async with (
        serving(KeyedProvider()) as server,
        orders_over_http(server.url, telemetry) as harness,
    ):
        forgeries = (
            forged_request(key="k1", service=server.url),
            forged_request(key="k2", service="payments", operation="../admin"),
            forged_request(key="k3", service="refunds"),
        )
        for forged in forgeries:
            await harness.setup_bus.client().send(
                forged, to=PERFORMER_ENDPOINT, idempotency_key=forged.key
            )
        await harness.run_until_quiet()
        parked = await harness.poison_messages(PERFORMER_ENDPOINT)
    assert len(parked) == 3
    assert server.received == []
    assert telemetry.named("call ") == []


async def test_a_call_is_a_span_of_the_messages_trace_with_its_metrics(
    telemetry: Telemetry,
) -> None:
    async with (
        serving(KeyedProvider()) as server,
        orders_over_http(server.url, telemetry) as harness,
    ):
        order = await place_order(harness)
    [key] = order.requested
    [call] = telemetry.named("call payments charge")
    [handle] = telemetry.named("handle EffectRequest")
    [requested] = telemetry.named("handle PlaceOrder")
    assert call.kind is SpanKind.CLIENT
    assert call.parent is not None
    assert call.parent.span_id == handle.context.span_id
    assert call.context.trace_id == requested.context.trace_id
    assert dict(call.attributes or {}) == {
        "bus.effect.service": "payments",
        "bus.effect.operation": "charge",
        "bus.effect.key": key,
        "http.response.status_code": 200,
        "bus.effect.outcome": "succeeded",
    }
    measured = {"bus.effect.service": "payments", "bus.effect.operation": "charge"}
    assert telemetry.points("bus.effects.calls") == [
        (measured | {"bus.effect.outcome": "succeeded"}, 1)
    ]
    assert telemetry.points("bus.effects.duration") == [
        (measured | {"bus.effect.outcome": "succeeded"}, 1)
    ]
    assert telemetry.points("bus.effects.retried") == []


def unavailable_once() -> Conversation:
    answered = [0]

    async def conversation(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        answered[0] += 1
        status, body = ("503 Busy", b"busy") if answered[0] == 1 else ("200 OK", b'{"id":"c"}')
        writer.write(head(status, f"Content-Length: {len(body)}") + body)
        await writer.drain()

    return conversation


async def test_a_transient_failure_is_counted_as_retried(telemetry: Telemetry) -> None:
    async with raw_server(unavailable_once()) as server:
        harness_of = orders_over_http(server.url, telemetry, retry=RetryPolicy(immediate=1))
        async with harness_of as harness:
            order = await place_order(harness)
    [key] = order.requested
    assert order.answers == [(key, "succeeded")]
    measured = {"bus.effect.service": "payments", "bus.effect.operation": "charge"}
    calls = dict(
        (str(a["bus.effect.outcome"]), v) for a, v in telemetry.points("bus.effects.calls")
    )
    assert calls == {"unavailable": 1, "succeeded": 1}
    assert telemetry.points("bus.effects.retried") == [(measured, 1)]
    failed, succeeded = sorted(
        telemetry.named("call payments charge"),
        key=lambda s: s.start_time or 0,
    )
    assert (failed.attributes or {})["bus.effect.outcome"] == "unavailable"
    assert (failed.attributes or {})["error.type"] == "ProviderUnavailable"
    assert (succeeded.attributes or {})["bus.effect.outcome"] == "succeeded"


# --- The credential, while the provider fails in every way ---------------------------------


def answering(status: str, body: bytes, *headers: str) -> Conversation:
    async def conversation(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(head(status, f"Content-Length: {len(body)}", *headers) + body)
        await writer.drain()

    return conversation


async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(head("200 OK"))
    while True:
        writer.write(b"x" * 65536)
        await writer.drain()


async def dropped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)


async def echoing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers with the request it got, headers and all, as a 400's reason and body."""
    request = (await read_request(reader)).decode(errors="replace")
    reason = request.replace("\r\n", " | ")
    body = json.dumps({"error": request}).encode()
    writer.write(head(f"400 {reason}", f"Content-Length: {len(body)}") + body)
    await writer.drain()


FAILURES: dict[str, Conversation] = {
    "endless": endless,
    "malformed": answering("200 OK", b'{"id": '),
    "array": answering("200 OK", b"[1, 2]"),
    "redirect": answering("302 Found", b"", "Location: http://127.0.0.1:9/steal"),
    "dropped": dropped,
    "unavailable": answering("503 Service Unavailable", b"<html>down</html>"),
    "echoing the request": echoing,
}


@pytest.mark.parametrize("failure", [*FAILURES, "refused"])
async def test_the_credential_is_in_no_log_line_poison_reason_or_span(
    failure: str, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with raw_server(FAILURES.get(failure, dropped)) as server:
        url = server.url
        if failure != "refused":
            async with orders_over_http(url, telemetry) as harness:
                order = await place_order(harness)
                parked = await harness.poison_messages(PERFORMER_ENDPOINT)
    if failure == "refused":  # the server is gone: its port refuses connections
        async with orders_over_http(url, telemetry) as harness:
            order = await place_order(harness)
            parked = await harness.poison_messages(PERFORMER_ENDPOINT)
    texts = [caplog.text, json.dumps(parked)]
    for span in telemetry.spans.get_finished_spans():
        texts.append(json.dumps(dict(span.attributes or {}), default=str))
        texts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
        texts.append(str(span.status.description))
    for text in texts:
        assert SECRET not in text
        assert "Bearer" not in text
        assert "authorization" not in text.lower()
    if failure == "echoing the request":
        # A 400 is a refusal for good: its body, the provider's own text (here the request it
        # got, credential and all), goes to the handler as its answer, and nowhere else.
        assert order.answers == [(order.requested[0], "failed")]
    else:
        [reason] = [p["poison"]["reason"] for p in parked]  # type: ignore[index]
        assert reason.startswith(REASONS[failure]), reason
        assert order.answers == []


REASONS = {
    "endless": "AnswerUnusable: service payments charge: answered 200 with a body larger than",
    "malformed": "AnswerUnusable: service payments charge: answered 200 with a body that is not",
    "array": "AnswerUnusable: service payments charge: answered 200 with a JSON list",
    "redirect": "AnswerUnusable: service payments charge: answered 302, a redirect",
    "dropped": "ProviderUnavailable: service payments charge: the connection failed after",
    "unavailable": "ProviderUnavailable: the provider answered 503",
    "refused": "ProviderNotReached: service payments charge: could not connect",
}
