"""Traces and metrics of the bus, read back from the OpenTelemetry SDK's in-memory exporters.

A PlaceOrder posted over HTTP with a ``traceparent`` runs orders -> payments -> shipping; the
whole chain is one trace whose spans link as the messages caused each other, also when
signals are duplicated and when a worker crashes after its commit. The metrics count each
outcome once: a duplicate is suppressed, not processed. Trace headers come from outside and
are written here as an attacker would: a bad one starts a new trace and changes nothing else.
Every mode on the in-memory stores; token mode on Azurite too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
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
from opentelemetry.trace import SpanKind, StatusCode

from shared import http_ingress
from shared.bus import Outcome
from shared.bus.app import Mode
from shared.bus.envelope import Envelope
from shared.bus.ids import derived_id, fresh_id
from shared.bus.outgoing import create_tokens, send_signals
from shared.clock import to_datetime
from shared.stores.instrumented import Fault, fault_at_first
from tests.bus.flow import FlowNames, build_flow
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.test_permanent_failures import NOTE, Keep, notes_app
from tests.bus.test_sweep import sweep_all
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize(
    "backend", backend_modes(azurite=["token"], sql=False), indirect=True
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith(prefix)]

    def receive(self, endpoint: str, outcome: str = "processed") -> ReadableSpan:
        [span] = [
            s
            for s in self.named(f"receive {endpoint}")
            if (s.attributes or {}).get("bus.outcome") == outcome
        ]
        return span

    def attribute_values(self, metric: str, attribute: str) -> set[object]:
        """Every value ``attribute`` takes in the data points of ``metric``."""
        values: set[object] = set()
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for found in (m for m in scope.metrics if m.name == metric):
                    values |= {(p.attributes or {}).get(attribute) for p in found.data.data_points}
        return values

    def counted(self, metric: str) -> Counter[tuple[str, str]]:
        """(endpoint, outcome) -> the sum of counter ``metric``, or a histogram's count."""
        totals: Counter[tuple[str, str]] = Counter()
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for found in (m for m in scope.metrics if m.name == metric):
                    for point in found.data.data_points:
                        attributes = point.attributes or {}
                        key = (
                            str(attributes.get("messaging.destination.name")),
                            str(attributes.get("bus.outcome", "")),
                        )
                        if isinstance(point, HistogramDataPoint):
                            totals[key] += point.count
                        elif isinstance(point, NumberDataPoint):
                            totals[key] += int(point.value)
        return totals


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


async def traced_flow(backend: Backend, mode: Mode, telemetry: Telemetry) -> Flow:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(
        backend,
        build_flow(names, publish=False, mode=mode),
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    return Flow(harness, names)


@dataclass
class Flow:
    harness: Harness
    names: FlowNames

    async def post(self, headers: dict[str, str], key: str = "o1") -> http_ingress.Answer:
        """POST /api/messages: a PlaceOrder for orders, with ``headers``."""
        raw = json.dumps(
            {"type": "PlaceOrder", "to": self.names.orders, "body": {"order_id": key, "amount": 7}}
        ).encode()
        return await http_ingress.handle(
            self.harness.setup_bus, {"Idempotency-Key": key, **headers}, raw
        )

    async def place(self, headers: dict[str, str] | None = None) -> str:
        answer = await self.post(headers or {"traceparent": TRACEPARENT})
        assert answer.status == 202, answer.body
        [placed] = answer.body["message_ids"]
        return str(placed)

    async def applied_once(self, placed: str) -> None:
        """Each of the chain's three messages applied exactly once."""
        charge = derived_id(placed, "out", 0, self.names.payments)
        assert await self.harness.applied(self.names.orders) == [placed]
        assert await self.harness.applied(self.names.payments) == [charge]
        assert await self.harness.applied(self.names.shipping) == [
            derived_id(charge, "out", 0, self.names.shipping)
        ]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_of(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def handler_under(telemetry: Telemetry, receive: ReadableSpan) -> ReadableSpan:
    [handler] = [s for s in telemetry.named("handle ") if parent_of(s) == span_id(receive)]
    return handler


def assert_chain(telemetry: Telemetry, names: FlowNames, processed: Sequence[str]) -> None:
    """ingress -> receive orders -> handle -> receive payments -> handle -> receive shipping,
    every receive with the outcome its endpoint has in ``processed`` order, in one trace
    continuing the caller's. After a receive that did not run the handler, the next one's
    parent is the caller's to check."""
    [ingress] = telemetry.named("ingress ")
    assert trace_of(ingress) == TRACE_ID
    assert parent_of(ingress) == int(CALLER_SPAN, 16)
    assert ingress.kind is SpanKind.PRODUCER
    parent: ReadableSpan | None = ingress
    chain = (names.orders, names.payments, names.shipping)
    for endpoint, outcome in zip(chain, processed, strict=True):
        receive = telemetry.receive(endpoint, outcome)
        assert receive.kind is SpanKind.CONSUMER
        assert trace_of(receive) == TRACE_ID, endpoint
        if parent is not None:
            assert parent_of(receive) == span_id(parent), endpoint
        parent = None
        attributes = receive.attributes or {}
        assert attributes["messaging.destination.name"] == endpoint
        assert attributes["messaging.system"] == "exactly_once_bus"
        if outcome == "processed":
            parent = handler_under(telemetry, receive)
            for child in ("commit ", "create ", "send "):
                if endpoint == names.shipping and child != "commit ":
                    continue  # the end of the chain sends nothing
                [span] = [s for s in telemetry.named(child) if parent_of(s) == span_id(receive)]
                assert trace_of(span) == TRACE_ID


async def test_one_trace_spans_a_three_endpoint_chain(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    placed = await flow.place()
    await flow.harness.run_until_quiet()

    await flow.applied_once(placed)
    assert_chain(telemetry, flow.names, ["processed"] * 3)
    assert {trace_of(s) for s in telemetry.finished()} == {TRACE_ID}
    [ingress] = telemetry.named("ingress ")
    [create_orders] = [s for s in telemetry.named("create ") if parent_of(s) == span_id(ingress)]
    assert (create_orders.attributes or {})["messaging.operation.type"] == "create"
    assert (create_orders.attributes or {})["messaging.message.id"] == placed

    endpoints = flow.names.orders, flow.names.payments, flow.names.shipping
    assert telemetry.counted("bus.messages.processed") == {(e, "processed"): 1 for e in endpoints}
    assert telemetry.counted("bus.messages.duplicates_suppressed") == {}
    assert telemetry.counted("bus.messages.poisoned") == {}
    assert telemetry.counted("messaging.process.duration") == {(e, ""): 1 for e in endpoints}
    for metric in ("bus.messages.processed", "messaging.process.duration"):
        assert telemetry.attribute_values(metric, "bus.mode") == {mode}
    assert telemetry.counted("bus.message.latency") == {(e, "processed"): 1 for e in endpoints}


async def test_duplicate_signals_are_counted_as_suppressed_in_the_same_trace(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    placed = await flow.place()
    orders = flow.harness.raw.queue(flow.names.orders)
    [signal] = await orders.peek()
    await orders.send(signal.content)  # a copy waiting beside the original

    await flow.harness.run_until_quiet()
    await sweep_all(flow.harness)  # the cleanup pass: token mode's R7
    await orders.send(signal.content)  # and one after everything finished
    await flow.harness.run_until_quiet()

    await flow.applied_once(placed)
    assert flow.harness.outcomes[Outcome.PROCESSED] == 3
    suppressed = telemetry.counted("bus.messages.duplicates_suppressed")
    names = flow.names
    if mode == "token":
        # The copy beside the original came before the cleanup: it found orders' token
        # claimed by the committed O(m), resumed and signalled the ChargeCard again, and
        # payments and shipping resumed the same way. The late copy, after the cleanup
        # deleted the token, is a duplicate.
        assert suppressed == {
            (names.orders, "resumed"): 1,
            (names.payments, "resumed"): 1,
            (names.shipping, "resumed"): 1,
            (names.orders, "duplicate"): 1,
        }
    else:
        assert suppressed == {(names.orders, "duplicate"): 2}
    assert telemetry.counted("bus.messages.processed") == {
        (e, "processed"): 1 for e in (flow.names.orders, flow.names.payments, flow.names.shipping)
    }
    assert_chain(telemetry, flow.names, ["processed"] * 3)
    copies = [
        s
        for s in telemetry.named(f"receive {flow.names.orders}")
        if (s.attributes or {})["bus.outcome"] != "processed"
    ]
    assert len(copies) == 2
    [ingress] = telemetry.named("ingress ")
    for copy in copies:
        if trace_of(copy) == TRACE_ID:  # a copy that got to read the message's envelope
            assert parent_of(copy) == span_id(ingress)
        else:  # its token was gone and it carried no envelope: a trace of its own
            assert copy.parent is None
            assert (copy.attributes or {})["bus.outcome"] == "duplicate"
    if mode == "token":
        # Token mode's signals carry the envelope, so even the late copy joins the trace.
        assert {trace_of(c) for c in copies} == {TRACE_ID}


async def test_a_crash_after_the_commit_resumes_in_the_same_trace(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    placed = await flow.place()
    commit = "table.transact"
    flow.harness.instrumentation.plan = fault_at_first(commit, Fault.CRASH_AFTER)

    await flow.harness.run_until_quiet()

    assert flow.harness.crashes == 1
    await flow.applied_once(placed)
    [crashed] = [
        s
        for s in telemetry.named(f"receive {flow.names.orders}")
        if s.status.status_code is StatusCode.ERROR
    ]
    assert (crashed.attributes or {})["error.type"] == "SimulatedCrash"
    assert "bus.outcome" not in (crashed.attributes or {})
    assert trace_of(crashed) == TRACE_ID
    resumed = telemetry.receive(flow.names.orders, "resumed")
    assert trace_of(resumed) == TRACE_ID
    # payments received what the crashed run committed: its parent is that run's handler.
    payments = telemetry.receive(flow.names.payments)
    assert parent_of(payments) == span_id(handler_under(telemetry, crashed))
    assert_chain(telemetry, flow.names, ["resumed", "processed", "processed"])
    assert {trace_of(s) for s in telemetry.finished()} == {TRACE_ID}
    # Counted by the delivery that finished the message: resumed, so suppressed.
    assert telemetry.counted("bus.messages.processed") == {
        (flow.names.payments, "processed"): 1,
        (flow.names.shipping, "processed"): 1,
    }
    assert telemetry.counted("bus.messages.duplicates_suppressed") == {
        (flow.names.orders, "resumed"): 1
    }


HOSTILE_TRACEPARENTS = [
    "garbage",
    f"00-{'0' * 32}-{CALLER_SPAN}-01",  # an all-zero trace id is invalid
    f"00-{TRACE_ID}-{'0' * 16}-01",  # so is an all-zero parent id
    f"ff-{TRACE_ID}-{CALLER_SPAN}-01",  # version ff is forbidden
    f"00-{TRACE_ID.upper()}-{CALLER_SPAN}-01",  # only lower-case hex
    f"00-{TRACE_ID}-{CALLER_SPAN}-01-extra",  # version 00 has exactly four fields
    f"00-{TRACE_ID}-{CALLER_SPAN}-01" + " " * 2000,
    f"00-{TRACE_ID}-{CALLER_SPAN}-\u0661\u0662",  # digits, but not ASCII hex
]


@pytest.mark.parametrize("traceparent", HOSTILE_TRACEPARENTS)
async def test_a_hostile_traceparent_over_http_starts_a_new_trace(
    backend: Backend, mode: Mode, telemetry: Telemetry, traceparent: str
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    placed = await flow.place({"TraceParent": traceparent, "tracestate": "k=v"})
    await flow.harness.run_until_quiet()

    await flow.applied_once(placed)
    [ingress] = telemetry.named("ingress ")
    assert ingress.parent is None
    assert trace_of(ingress) != TRACE_ID
    assert {trace_of(s) for s in telemetry.finished()} == {trace_of(ingress)}
    assert telemetry.counted("bus.messages.poisoned") == {}


async def test_an_oversized_tracestate_is_ignored_with_its_traceparent(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    placed = await flow.place({"traceparent": TRACEPARENT, "tracestate": "k=" + "v" * 100_000})
    await flow.harness.run_until_quiet()

    await flow.applied_once(placed)
    [ingress] = telemetry.named("ingress ")
    assert ingress.parent is None
    assert trace_of(ingress) != TRACE_ID


async def test_a_hostile_traceparent_in_a_token_is_ignored_not_parked(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    """Someone who may write tokens and send signals (the storage account's keys) plants a
    PlaceOrder whose envelope carries a malformed trace context: it is processed normally,
    in a trace of its own."""
    flow = await traced_flow(backend, mode, telemetry)
    config = flow.harness.config
    message_id, sender = fresh_id(), "intruder"
    envelope = Envelope(
        id=message_id,
        type="PlaceOrder",
        kind="command",
        source=sender,
        destination=flow.names.orders,
        partition_key="o9",
        correlation_id=message_id,
        causation_id=None,
        created_at=to_datetime(config.clock()),
        headers={"traceparent": "00-" + "z" * 32 + "-" + "z" * 16 + "-01", "tracestate": "=,="},
        body={"order_id": "o9", "amount": 3},
    )
    tokens = flow.harness.raw.blob_container(config.tokens_container)
    created = await create_tokens(
        tokens,
        [envelope],
        payloads=flow.harness.raw.blob_container(config.payloads_container),
        sender=sender,
        incoming_id=fresh_id(),
        config=config,
    )
    await send_signals(
        flow.harness.raw,
        tuple(created.committed_candidates),
        created.hints,
        config=config,
    )

    await flow.harness.run_until_quiet()

    assert await flow.harness.applied(flow.names.orders) == [message_id]
    receive = telemetry.receive(flow.names.orders)
    assert receive.parent is None
    assert telemetry.counted("bus.messages.poisoned") == {}
    assert telemetry.counted("bus.messages.processed")[(flow.names.orders, "processed")] == 1


async def test_a_malformed_signal_is_counted_as_poisoned_in_a_trace_of_its_own(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    await flow.harness.raw.queue(flow.names.orders).send('{"traceparent": "' + TRACEPARENT)

    await flow.harness.run_until_quiet(max_passes=3)

    receive = telemetry.receive(flow.names.orders, "poisoned")
    assert receive.parent is None
    assert trace_of(receive) != TRACE_ID
    assert telemetry.counted("bus.messages.poisoned") == {(flow.names.orders, "poisoned"): 1}
    assert telemetry.counted("bus.messages.processed") == {}


async def test_without_an_sdk_the_caller_trace_context_still_travels(
    backend: Backend, mode: Mode
) -> None:
    """No providers configured (the API's no-op): no span is recorded, yet the envelopes the
    chain sends carry the caller's trace id, so a traced service downstream continues it."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))
    flow = Flow(harness, names)
    await flow.place()
    [signal] = await harness.raw.queue(names.orders).receive(1, visibility_timeout=30)
    await harness.deliver(names.orders, signal)

    [token] = await harness.tokens_in_flight()  # the ChargeCard's, not the one orders processed
    blob = await harness.raw.blob_container(harness.config.tokens_container).read(token)
    envelope = Envelope.from_bytes(blob.data)
    assert envelope.destination == names.payments
    assert envelope.headers["traceparent"].split("-")[1] == TRACE_ID


async def test_a_repeated_idempotency_key_is_a_deduplicated_ingress_in_the_caller_trace(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    flow = await traced_flow(backend, mode, telemetry)
    placed = await flow.place()
    again = await flow.post({"traceparent": TRACEPARENT})

    assert again.status == 200
    assert again.body["message_ids"] == [placed]
    first, repeat = telemetry.named("ingress ")
    assert (first.attributes or {})["bus.deduplicated"] is False
    assert (repeat.attributes or {})["bus.deduplicated"] is True
    assert parent_of(repeat) == int(CALLER_SPAN, 16)
    assert not [s for s in telemetry.named("create ") if parent_of(s) == span_id(repeat)]
    [resent] = [s for s in telemetry.named("send ") if parent_of(s) == span_id(repeat)]
    assert (resent.attributes or {})["messaging.message.id"] == placed


async def test_a_permanent_failure_is_counted_as_poisoned_once(
    backend: Backend, mode: Mode, telemetry: Telemetry
) -> None:
    """Issue 35: a state over a table property parks on its first try and counts as the
    other parkings do, once, under a policy that would have retried it."""
    runs: Counter[str] = Counter()
    name = f"notes{unique_name('')[:8]}"
    harness = await Harness.create(
        backend,
        notes_app(name, mode, runs),
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    await harness.setup_bus.client().send(Keep(key="k", note=NOTE), to=name, idempotency_key="k")

    await harness.run_until_quiet(max_passes=3)

    assert runs["keep"] == 1
    telemetry.receive(name, "poisoned")
    assert telemetry.counted("bus.messages.poisoned") == {(name, "poisoned"): 1}
    assert telemetry.counted("bus.messages.processed") == {}
