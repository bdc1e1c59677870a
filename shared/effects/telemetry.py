"""Traces and metrics of the calls the performer makes to providers (``docs/tracing.md``).

A call's span is a child of the performer's handler span, so it joins the trace of the
message that requested the effect. It names the service, the operation, the idempotency key,
the status and the outcome; never the body, a header or the credential. The instruments are
made on the meter provider of the bus under way (``shared.bus.telemetry.current``), once per
bus telemetry.

Outcomes: ``succeeded`` and ``failed`` (the provider's definite answer), ``conflict`` (its key
refused as used with another body), ``unavailable`` (no usable answer: retried with the same
key, counted in ``bus.effects.retried`` too) and ``uncertain`` (an at-most-once call whose
outcome is unknown: ``count_uncertain``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from opentelemetry.trace import Span, SpanKind

from shared.bus.telemetry import BusTelemetry, current, failed
from shared.errors import EffectKeyConflict, ProviderUnavailable

SERVICE = "bus.effect.service"
OPERATION = "bus.effect.operation"
KEY = "bus.effect.key"
STATUS = "http.response.status_code"
OUTCOME = "bus.effect.outcome"


class EffectInstruments:
    """The effect instruments on one bus telemetry's meter."""

    def __init__(self, telemetry: BusTelemetry) -> None:
        meter = telemetry.meter
        self.tracer = telemetry.tracer
        self.calls = meter.create_counter(
            "bus.effects.calls",
            unit="{call}",
            description="Calls to providers, by service, operation and outcome",
        )
        self.duration = meter.create_histogram(
            "bus.effects.duration",
            unit="s",
            description="Duration of a call to a provider, its answer read",
        )
        self.retried = meter.create_counter(
            "bus.effects.retried",
            unit="{call}",
            description="Calls that gave no usable answer (refused, dropped, timed out, 429, "
            "5xx, unusable answer): the request is retried with the same key",
        )
        self.uncertain = meter.create_counter(
            "bus.effects.uncertain",
            unit="{call}",
            description="At-most-once calls answered uncertain: their outcome is unknown",
        )


_instruments: WeakKeyDictionary[BusTelemetry, EffectInstruments] = WeakKeyDictionary()


def instruments() -> EffectInstruments:
    """The effect instruments of the bus under way."""
    telemetry = current()
    found = _instruments.get(telemetry)
    if found is None:
        found = _instruments[telemetry] = EffectInstruments(telemetry)
    return found


@dataclass
class ObservedCall:
    """One call under way; ``answered`` records the provider's definite answer."""

    span: Span
    outcome: str | None = None

    def answered(self, status: int, outcome: str) -> None:
        self.outcome = outcome
        self.span.set_attribute(STATUS, status)
        self.span.set_attribute(OUTCOME, outcome)


@contextmanager
def observed_call(service: str, operation: str, key: str) -> Iterator[ObservedCall]:
    """The span and metrics of one call to ``service``'s ``operation`` under ``key``. An
    error leaving the block is the call's outcome: ProviderUnavailable ``unavailable``,
    EffectKeyConflict ``conflict``."""
    meters = instruments()
    measured = {SERVICE: service, OPERATION: operation}
    span = meters.tracer.start_span(
        f"call {service} {operation}", kind=SpanKind.CLIENT, attributes=measured | {KEY: key}
    )
    call = ObservedCall(span)
    started = time.perf_counter()
    try:
        yield call
    except BaseException as error:
        call.outcome = _outcome_of(error)
        span.set_attribute(OUTCOME, call.outcome)
        failed(span, error)
        if isinstance(error, ProviderUnavailable):
            meters.retried.add(1, measured)
        raise
    finally:
        outcome = {OUTCOME: call.outcome or "error"}
        meters.calls.add(1, measured | outcome)
        meters.duration.record(time.perf_counter() - started, measured | outcome)
        span.end()


def count_uncertain(service: str, operation: str) -> None:
    """Counts an at-most-once call answered ``uncertain`` (the performer calls it once per
    such answer)."""
    instruments().uncertain.add(1, {SERVICE: service, OPERATION: operation})


def _outcome_of(error: BaseException) -> str:
    if isinstance(error, ProviderUnavailable):
        return "unavailable"
    if isinstance(error, EffectKeyConflict):
        return "conflict"
    return "error"
