"""At-most-once services (docs/effects.md, section 5) through the real receive pipeline over
the in-memory stores: the performer calls only after inserting the effect's marker, and
answers ``uncertain``, without calling again, whenever the call's outcome is unknown or the
marker was already there (a racing copy, a crash after the call, an operator's replay)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from pydantic import BaseModel

from shared.bus import BusApp, HandlerContext, RetryPolicy
from shared.bus.effects import PERFORMER_ENDPOINT, EffectAnswered
from shared.bus.messages import Command
from shared.bus.poison import replay
from shared.clock import ManualClock
from shared.effects.markers import performer_markers
from shared.effects.memory import DECLINE_FIELD, InMemoryProvider
from shared.effects.performer import add_performer
from shared.effects.provider import IN_PROGRESS, KEY_REUSED, Provider, ProviderAnswer
from shared.errors import ConfigurationError
from shared.stores.instrumented import Fault, Operation
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend


class SendParcel(Command):
    partition_by = "parcel"
    parcel: str
    decline: bool = False


class ParcelAnswered(EffectAnswered):
    pass


class Parcel(BaseModel):
    requested: list[str] = []
    answers: list[tuple[str, str, int]] = []
    """(key, outcome, status) of each answer processed, in order."""


def ignoring_keys(*, lost_answers: int = 0, unavailable: int = 0) -> InMemoryProvider:
    """A courier's API that honours no idempotency key: every call it is sent applies."""
    return InMemoryProvider(lost_answers=lost_answers, unavailable=unavailable, honours_keys=False)


def courier_app(provider: Provider, backend: Backend, retry: RetryPolicy) -> BusApp:
    """A courier's API that honours no idempotency key: booking twice ships twice."""
    app = BusApp()
    parcels = app.endpoint("parcels", Parcel)

    @parcels.handles(SendParcel)
    def book(ctx: HandlerContext[Parcel], cmd: SendParcel) -> None:
        body: dict[str, object] = {"parcel": cmd.parcel, DECLINE_FIELD: cmd.decline}
        key = ctx.request_effect(
            service="courier", operation="book", body=body, answer=ParcelAnswered
        )
        ctx.state.requested.append(key)

    @parcels.handles(ParcelAnswered)
    def answered(ctx: HandlerContext[Parcel], answer: ParcelAnswered) -> None:
        ctx.state.answers.append((answer.key, answer.outcome, answer.status))

    app.service("courier", operations={"book": "/v1/bookings"}, at_most_once=True)
    add_performer(
        app,
        {"courier": provider},
        call_timeout=5.0,
        retry=retry,
        markers=performer_markers(backend.account),
    )
    return app


RETRIED = RetryPolicy(immediate=3)


async def courier(provider: Provider, *, retry: RetryPolicy = RETRIED, **config: object) -> Harness:
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    return await Harness.create(
        backend, courier_app(provider, backend, retry), jitter=random.Random(7), **config
    )


async def booked(harness: Harness, *, decline: bool = False) -> Parcel:
    await harness.setup_bus.client().send(
        SendParcel(parcel="p1", decline=decline), to="parcels", idempotency_key="book-p1"
    )
    await harness.run_until_quiet()
    return await harness.applied_state("parcels", "p1", Parcel)


async def test_a_call_that_answers_is_made_once_and_answered_as_for_any_service() -> None:
    provider = ignoring_keys()
    parcel = await booked(await courier(provider))
    [key] = parcel.requested
    assert parcel.answers == [(key, "succeeded", 200)]
    assert provider.calls == 1
    assert provider.applied(key) == 1


async def test_a_refusal_is_failed_as_for_any_service() -> None:
    provider = ignoring_keys()
    parcel = await booked(await courier(provider), decline=True)
    [key] = parcel.requested
    assert parcel.answers == [(key, "failed", 402)]
    assert provider.calls == 1


async def test_a_lost_answer_is_uncertain_and_never_called_again() -> None:
    """Applied, but the connection dropped: an idempotent service would be called again with
    the same key; this one must not be, so the handler hears ``uncertain``."""
    provider = ignoring_keys(lost_answers=1)
    parcel = await booked(await courier(provider))
    [key] = parcel.requested
    assert parcel.answers == [(key, "uncertain", 0)]
    assert provider.calls == 1
    assert provider.applied(key) == 1


async def test_a_5xx_is_uncertain_with_its_status_and_never_called_again() -> None:
    provider = ignoring_keys(unavailable=1)
    parcel = await booked(await courier(provider))
    [key] = parcel.requested
    assert parcel.answers == [(key, "uncertain", 503)]
    assert provider.calls == 1
    assert provider.applied(key) == 0


async def test_an_unknown_outcome_is_answered_by_the_run_that_called() -> None:
    """Not raised for a retry: with no retry left, that would park the request and the
    handler would never hear of its effect."""
    provider = ignoring_keys(lost_answers=1)
    harness = await courier(provider, retry=RetryPolicy())
    parcel = await booked(harness)
    [key] = parcel.requested
    assert parcel.answers == [(key, "uncertain", 0)]
    assert await harness.poison_messages(PERFORMER_ENDPOINT) == []


@dataclass
class Answering:
    """A provider that answers every call with ``status``: 422, the key was used with
    another body; 409, a call under the key is still in progress."""

    status: int
    calls: int = 0

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        self.calls += 1
        return ProviderAnswer(self.status, {"error": "key in use"})


async def test_a_key_conflict_is_parked_as_for_any_service_and_not_called_again() -> None:
    provider = Answering(KEY_REUSED)
    harness = await courier(provider)
    parcel = await booked(harness)
    [parked] = await harness.poison_messages(PERFORMER_ENDPOINT)
    poison = parked["poison"]
    assert isinstance(poison, dict)
    assert poison["reason"].startswith("EffectKeyConflict: ")
    assert parcel.answers == []
    assert provider.calls == 1


async def test_in_progress_is_uncertain_and_never_called_again() -> None:
    """A service that honours no key proves nothing by "in progress": its outcome is unknown,
    so the handler hears ``uncertain`` with the status, and nothing is parked."""
    provider = Answering(IN_PROGRESS)
    harness = await courier(provider)
    parcel = await booked(harness)
    [key] = parcel.requested
    assert parcel.answers == [(key, "uncertain", 409)]
    assert provider.calls == 1
    assert await harness.poison_messages(PERFORMER_ENDPOINT) == []


def crash_before_the_performers_commit(operation: Operation) -> Fault | None:
    commit = operation.kind == "table.transact" and operation.target == PERFORMER_ENDPOINT
    return Fault.CRASH_BEFORE if commit else None


async def test_after_a_crash_between_the_call_and_the_commit_the_next_run_does_not_call() -> None:
    provider = ignoring_keys()
    harness = await courier(provider)
    calls_at_crash: list[int] = []

    def crash_once(operation: Operation) -> Fault | None:
        if calls_at_crash or crash_before_the_performers_commit(operation) is None:
            return None
        calls_at_crash.append(provider.calls)
        return Fault.CRASH_BEFORE

    harness.instrumentation.plan = crash_once
    parcel = await booked(harness)
    [key] = parcel.requested
    assert calls_at_crash == [1]
    assert harness.crashes == 1
    assert provider.calls == 1
    assert provider.applied(key) == 1
    assert parcel.answers == [(key, "uncertain", 0)]


async def test_an_operators_replay_of_a_parked_request_finds_the_marker_and_does_not_call() -> None:
    """The call was made, then every commit of the performer failed until its retries ran
    out: parked. The replay re-sends the same request (same key); it must not call again."""
    provider = ignoring_keys()
    harness = await courier(provider)

    def commit_fails(operation: Operation) -> Fault | None:
        commit = operation.kind == "table.transact" and operation.target == PERFORMER_ENDPOINT
        return Fault.ERROR_BEFORE if commit else None

    harness.instrumentation.plan = commit_fails
    parcel = await booked(harness)
    assert len(await harness.poison_messages(PERFORMER_ENDPOINT)) == 1
    assert parcel.answers == []
    harness.instrumentation.plan = lambda operation: None

    assert await replay(harness.raw, PERFORMER_ENDPOINT) == 1
    await harness.run_until_quiet()

    parcel = await harness.applied_state("parcels", "p1", Parcel)
    [key] = parcel.requested
    assert provider.calls == 1
    assert parcel.answers == [(key, "uncertain", 0)]


async def test_uncertain_answers_are_counted_by_service_and_operation() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    await booked(await courier(ignoring_keys(lost_answers=1), meter_provider=meters))

    data = reader.get_metrics_data()
    points = [
        point
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "bus.effects.uncertain"
        for point in metric.data.data_points
    ]
    [point] = points
    assert isinstance(point, NumberDataPoint)
    assert point.value == 1
    assert dict(point.attributes or {}) == {
        "bus.effect.service": "courier",
        "bus.effect.operation": "book",
    }
    meters.shutdown()


def test_an_at_most_once_service_without_a_marker_table_is_refused_at_start_up() -> None:
    app = BusApp()
    app.service("courier", operations={"book": "/v1/bookings"}, at_most_once=True)
    with pytest.raises(ConfigurationError, match=r"at-most-once services \['courier'\]"):
        add_performer(app, {"courier": InMemoryProvider()}, call_timeout=5.0)
