"""Traces and metrics of the bus, through the OpenTelemetry API only.

The library never configures an SDK: without one (``shared.observability`` sets it up at the
app's edge from the ``OTEL_*`` and Application Insights settings) every span is a non-recording
one and every instrument a no-op: tens of microseconds of CPU per message, against storage
requests of milliseconds (docs/tracing.md). The W3C trace context still travels
with the messages then, so a trace started upstream continues.

The trace context of a message is the ``traceparent`` (and ``tracestate``) of its envelope's
headers: the span of the handler that sent it, or of the ingress that accepted it. Those
headers come from outside in the end (an HTTP request's, a token anyone with the storage
account's keys may write), so they are read by the W3C propagator, which ignores a malformed
one, and only up to ``MAX_TRACE_HEADER_CHARS``: a bad value starts a new trace, nothing else.

Names follow the OpenTelemetry semantic conventions for messaging where they fit
(``messaging.*``); what only this bus has (the exactly-once outcome, the mode) is ``bus.*``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import datetime
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.clock import Clock, to_datetime
from shared.logsafe import shown

if TYPE_CHECKING:
    from shared.bus.envelope import Envelope

SCOPE = "shared.bus"
"""The instrumentation scope of every span and instrument here."""
SYSTEM = "exactly_once_bus"
"""``messaging.system``: this bus, over Azure Storage queues, blobs and tables."""
TRACE_HEADERS = ("traceparent", "tracestate")
MAX_TRACE_HEADER_CHARS = 512
"""W3C lets a tracestate be cut at 512 characters; a longer value of either is ignored."""

_W3C = TraceContextTextMapPropagator()

DESTINATION = "messaging.destination.name"
"""Metric and span attribute: the endpoint a message is for (its queue)."""
SENDER = "bus.sender"
"""Metric and span attribute: who sent a message (an endpoint, or an ingress: http, cli...)."""
OUTCOME = "bus.outcome"
"""Receive span attribute and metric attribute: processed, resumed, duplicate, poisoned, ..."""
SUPPRESSED = frozenset({"duplicate", "resumed"})
"""Outcomes of a copy whose handler did not run again: an earlier copy's effects stand."""


def trace_headers() -> dict[str, str]:
    """The current span's W3C trace context as envelope headers (empty without a valid one)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier


def remote_context(headers: Mapping[str, str]) -> Context:
    """The trace context ``headers`` carry (names case-insensitive), as the parent of a new
    span; an empty context, so a new trace, when they carry none or a malformed one."""
    carrier: dict[str, str] = {}
    for key, value in headers.items():
        name = key.lower()
        if name in TRACE_HEADERS and isinstance(value, str):
            if len(value) > MAX_TRACE_HEADER_CHARS:
                return Context()
            carrier[name] = value
    if "traceparent" not in carrier:
        return Context()
    return _W3C.extract(carrier, context=Context())


@contextmanager
def continuing(headers: Mapping[str, str]) -> Iterator[None]:
    """Within the block, the trace context of a request's ``headers`` (``remote_context``) is
    the current one: the spans started in it continue the caller's trace, or start a new one."""
    attached = otel_context.attach(remote_context(headers))
    try:
        yield
    finally:
        otel_context.detach(attached)


class BusTelemetry:
    """The tracer and instruments of one bus (``BusConfig.telemetry``), from the providers
    its config names, else the global ones the app's edge configured."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.meter = meter
        """Where the instruments of the bus's other parts are made (``shared.effects``)."""
        self.processed = meter.create_counter(
            "bus.messages.processed",
            unit="{message}",
            description="Messages whose handler ran and whose effects this delivery committed",
        )
        self.suppressed = meter.create_counter(
            "bus.messages.duplicates_suppressed",
            unit="{message}",
            description="Deliveries of a message already processed: its handler did not run "
            "again (bus.outcome duplicate or resumed)",
        )
        self.poisoned = meter.create_counter(
            "bus.messages.poisoned",
            unit="{message}",
            description="Messages parked in a poison queue with their reason",
        )
        self.fields_ignored = meter.create_counter(
            "bus.messages.fields_ignored",
            unit="{field}",
            description="Top-level body fields a reader dropped because its model does not know "
            "them (a newer sender's additions; shared.bus.reading), by reader and type",
        )
        self.given_back = meter.create_counter(
            "bus.messages.given_back",
            unit="{message}",
            description="Messages written by a newer version of the app, given back for an "
            "upgraded instance (bus.give_back.kind: message_type or format)",
        )
        self.handler_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of a handler run",
        )
        self.latency = meter.create_histogram(
            "bus.message.latency",
            unit="s",
            description="From a message's send (its envelope's created_at) to the commit of "
            "its processing",
        )
        # What the cleanup pass measures at its end (``shared.cleanup.backlog``): gauges, since
        # each is a level seen at one moment, and a count of passes, whose absence says the
        # figures are stale (docs/alerts.md).
        self.parked = meter.create_gauge(
            "bus.parked.messages",
            unit="{message}",
            description="Messages parked in an endpoint's poison queue, as the last cleanup "
            "pass counted them",
        )
        self.tokens_in_flight = meter.create_gauge(
            "bus.tokens.in_flight",
            unit="{token}",
            description="Tokens not yet consumed, by sender (an endpoint, or (outside) for the "
            "ingress and the tools), as the last cleanup pass counted them",
        )
        self.oldest_token_age = meter.create_gauge(
            "bus.tokens.oldest_age",
            unit="s",
            description="Age of the sender's oldest due token not yet consumed (0: none), as "
            "the last cleanup pass saw it",
        )
        self.cleanup_passes = meter.create_counter(
            "bus.cleanup.passes",
            unit="{pass}",
            description="Cleanup passes that finished and measured the backlog, each counted "
            "after setting the gauges above",
        )

    @contextmanager
    def active(self) -> Iterator[BusTelemetry]:
        """Makes this the telemetry of the sends made meanwhile (``current()``)."""
        reset = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(reset)

    def receiving(self, endpoint: str, mode: str, dequeue_count: int, clock: Clock) -> Receiving:
        return Receiving(self, endpoint, mode, dequeue_count, clock)

    @contextmanager
    def handling(self, endpoint: str, mode: str, envelope: Envelope) -> Iterator[None]:
        """The span of a handler run, and its duration. Sends made in it carry this span."""
        attributes = _messaging(endpoint, "process") | {
            "bus.mode": mode,
            "bus.message.type": envelope.type,
        }
        started = time.perf_counter()
        error: str | None = None
        try:
            with within(self.tracer.start_span(f"handle {envelope.type}", attributes=attributes)):
                yield
        except BaseException as e:
            error = type(e).__name__
            raise
        finally:
            measured = {k: v for k, v in attributes.items() if k != "bus.message.type"}
            if error is not None:
                measured["error.type"] = error
            self.handler_duration.record(time.perf_counter() - started, measured)

    def committing(self, endpoint: str, mode: str, outputs: int) -> Span:
        """The span of a commit (state, dedup record, audit row and outputs in one)."""
        return self.tracer.start_span(
            f"commit {endpoint}",
            attributes={
                "messaging.system": SYSTEM,
                DESTINATION: endpoint,
                "messaging.batch.message_count": outputs,
                "bus.mode": mode,
            },
        )

    def creating(self, envelope: Envelope) -> Span:
        """The span of one token's creation (the message's body, before its commit)."""
        attributes = _messaging(envelope.destination, "create") | {
            "messaging.message.id": envelope.id,
            "messaging.message.conversation_id": envelope.correlation_id,
        }
        return self.tracer.start_span(
            f"create {envelope.destination}", kind=SpanKind.PRODUCER, attributes=attributes
        )

    def sending(self, destination: str, message_id: str) -> Span:
        """The span of one signal's send on its destination's queue."""
        attributes = _messaging(destination, "send") | {"messaging.message.id": message_id}
        return self.tracer.start_span(
            f"send {destination}", kind=SpanKind.PRODUCER, attributes=attributes
        )

    def ingress(self, sender: str, message_type: str) -> Span:
        """The span of a send from outside the bus (HTTP, CLI); its messages carry it."""
        return self.tracer.start_span(
            f"ingress {message_type}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.name": "ingress",
                SENDER: sender,
                "bus.message.type": message_type,
            },
        )


_active: ContextVar[BusTelemetry | None] = ContextVar("bus_telemetry", default=None)
_global: BusTelemetry | None = None


def current() -> BusTelemetry:
    """The telemetry of the receive or ingress under way, else one on the global providers."""
    active = _active.get()
    if active is not None:
        return active
    global _global
    if _global is None:
        _global = BusTelemetry()
    return _global


def _messaging(destination: str, operation: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        DESTINATION: destination,
    }


def failed(span: Span, error: BaseException) -> None:
    """Marks ``span`` as ended by ``error`` (an exception or a crash)."""
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    span.set_attribute("error.type", type(error).__name__)


def within(span: Span) -> Current:
    """``span`` as the current span until the block ends, then ended, failed if it raised."""
    return Current(span)


class Current:
    """See ``within``. A span that records nothing (no SDK, or not sampled) is not made
    current: its context is its parent's or unsampled, so children would come out the same,
    and this is the path every message takes when telemetry is off."""

    __slots__ = ("_attached", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self._attached: Token[Context] | None = None

    def __enter__(self) -> Span:
        if self.span.is_recording():
            self._attached = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> None:
        if self._attached is not None:
            otel_context.detach(self._attached)
        if error is not None:
            failed(self.span, error)
        self.span.end()


class Receiving:
    """The receive span of one delivery and the metrics of its outcome; a context manager
    around the delivery, during which this bus's telemetry is the one sends use.

    The span's parent is the trace context of the message's envelope, known only once the
    token is read and decoded: ``begin`` starts the span then (with the delivery's start
    time) and makes it current; a delivery that never gets that far (a malformed signal, a
    copy whose token is gone) gets a span of its own trace when it ends."""

    def __init__(
        self, telemetry: BusTelemetry, endpoint: str, mode: str, dequeue_count: int, clock: Clock
    ) -> None:
        self.telemetry = telemetry
        self.endpoint = endpoint
        self.mode = mode
        self.clock = clock
        self.started_ns = time.time_ns()
        self.attributes: dict[str, str | int] = {
            **_messaging(endpoint, "process"),
            "messaging.operation.name": "receive",
            "bus.mode": mode,
            "bus.dequeue_count": dequeue_count,
        }
        self.outcome: str | None = None
        """Set by the pipeline before the block ends: processed, duplicate, poisoned, ..."""
        self.given_back: str | None = None
        """With outcome given_back: what was newer (``shared.bus.giveback.kind_of``)."""
        self.span: Span | None = None
        self.sent_at: datetime | None = None
        self._attached: Token[Context] | None = None
        self._active: Token[BusTelemetry | None] | None = None

    def begin(self, envelope: Envelope) -> None:
        """Start the span as a child of the envelope's trace context (once per delivery)."""
        if self.span is not None:
            return
        self.sent_at = envelope.created_at
        self.span = self._start(remote_context(envelope.headers))
        self.span.set_attributes(
            {
                # Set before the type is checked: what the sender wrote, escaped.
                "messaging.message.id": shown(envelope.id, 100),
                "messaging.message.conversation_id": shown(envelope.correlation_id, 100),
                "bus.message.type": shown(envelope.type, 100),
                "bus.source": shown(envelope.source, 100),
            }
        )
        self._attached = otel_context.attach(trace.set_span_in_context(self.span))

    def __enter__(self) -> Receiving:
        self._active = _active.set(self.telemetry)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> None:
        span = self.span or self._start(Context())
        if self._attached is not None:
            otel_context.detach(self._attached)
            self._attached = None
        if self._active is not None:
            _active.reset(self._active)
        if error is not None:
            failed(span, error)
        elif self.outcome is not None:
            span.set_attribute(OUTCOME, self.outcome)
            metric = {k: v for k, v in self.attributes.items() if k != "bus.dequeue_count"}
            self._count(self.outcome, metric | {OUTCOME: self.outcome})
        span.end()

    def _start(self, parent: Context) -> Span:
        return self.telemetry.tracer.start_span(
            f"receive {self.endpoint}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=self.attributes,
            start_time=self.started_ns,
        )

    def _count(self, outcome: str, attributes: dict[str, str | int]) -> None:
        telemetry = self.telemetry
        if outcome == "processed":
            telemetry.processed.add(1, attributes)
            latency = self._latency()
            if latency is not None:
                telemetry.latency.record(latency, attributes)
        elif outcome in SUPPRESSED:
            telemetry.suppressed.add(1, attributes)
        elif outcome == "poisoned":
            telemetry.poisoned.add(1, attributes)
        elif outcome == "given_back":
            kind: dict[str, str | int] = {"bus.give_back.kind": self.given_back or "format"}
            telemetry.given_back.add(1, attributes | kind)

    def _latency(self) -> float | None:
        """Seconds from the envelope's send time to now; None if unknown or negative (a
        sender's clock ahead of ours)."""
        if self.sent_at is None or self.sent_at.tzinfo is None:
            return None
        seconds = (to_datetime(self.clock()) - self.sent_at).total_seconds()
        return seconds if seconds >= 0 else None
