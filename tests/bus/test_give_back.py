"""Giving a message back for an upgraded instance (issue 29): an instance whose app does not
know a message's type gives it back, hidden for growing delays, and parks it only once
``BUS_GIVE_BACK_SECONDS`` is used up, with a reason that says so; an instance that knows the
type then processes it once. A failed re-send goes to the host; a forged count never loops.

Every endpoint mode on the in-memory stores (a manual clock); token mode on Azurite, where the
real queue hides the given-back signal for its delay."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from shared.bus import Bus, BusApp, Outcome, RetryPolicy, formats
from shared.bus.app import Mode
from shared.bus.envelope import MAX_GIVE_BACKS, MAX_SIGNAL_CHARS, Signal
from shared.bus.giveback import (
    FIRST_DELAY,
    MAX_DELAY,
    afresh_text,
    count_of,
    given_back_text,
    kind_of,
    next_step,
)
from shared.bus.poison import replay
from shared.bus.reading import read_body
from shared.bus.telemetry import BusTelemetry
from shared.errors import MalformedSignal, NewerVersion, UnknownMessageType
from shared.resources import poison_queue
from shared.stores.instrumented import Fault, fault_at_first
from shared.stores.queue import QueueMessage
from tests.bus.flow import Ledger
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.test_failures import Flaky, flaky_app
from tests.conftest import Backend, unique_name

in_memory = pytest.mark.parametrize("backend", backend_modes(azurite=[], sql=False), indirect=True)

WINDOW = 100.0
"""Seconds: delays of 10, 20 and 40 s, then 30 s (cut to the window), then parked."""


async def old_instance(
    backend: Backend, mode: Mode, window: float = WINDOW, **config: object
) -> Harness:
    """An instance of an app whose endpoint does not handle Flaky yet (the old version)."""
    name = f"gb{unique_name('')[:8]}"
    old = BusApp()
    old.endpoint(name, state=Ledger, mode=mode)
    return await Harness.create(backend, old, give_back_seconds=window, **config)


def new_bus(harness: Harness) -> Bus:
    """The new version of the app, on the same account and containers."""
    [name] = harness.app.endpoints
    return Bus(flaky_app(name, {"left": 0}), harness.raw, harness.config)


async def send_flaky(harness: Harness) -> str:
    [name] = harness.app.endpoints
    await new_bus(harness).client().send(Flaky(key="k"), to=name, idempotency_key="k1")
    return name


async def visible(harness: Harness, name: str) -> list[QueueMessage]:
    """Peek: what a receive would get now, without taking it."""
    return await harness.raw.queue(name).peek(32)


async def deliver_one(harness: Harness, name: str) -> QueueMessage:
    [message] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
    await harness.deliver(name, message)
    return message


@in_memory
async def test_an_unknown_type_is_given_back_with_growing_delays_then_parked(
    backend: Backend, mode: Mode
) -> None:
    # Given an old instance and a message of a type only the new version knows
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    assert backend.clock is not None

    # When the old instance receives it each time it comes back
    delays = []
    for count in range(1, 5):
        await deliver_one(harness, name)
        # Then it is given back: one signal, hidden, counting the give-backs, nothing else
        assert harness.outcomes[Outcome.GIVEN_BACK] == count
        assert await harness.raw.queue(name).approximate_count() == 1
        assert await visible(harness, name) == []
        hidden = 0
        while not await visible(harness, name):
            backend.clock.advance(1)
            hidden += 1
        delays.append(hidden)
        [message] = await visible(harness, name)
        assert json.loads(message.content)["given_back"] == count
        assert message.dequeue_count == 0  # a new queue message: the host's count starts again
        assert await harness.outbox_records(name) == []
    assert delays == [10, 20, 40, 30]  # doubling, the last cut to the 100 s window

    # And once the window is used up it is parked, saying why and what brings it back
    await deliver_one(harness, name)
    assert harness.outcomes[Outcome.POISONED] == 1
    [parked] = await harness.poison_messages(name)
    reason = str(parked["poison"])
    assert "newer version" in reason
    assert "has no handler for message type 'Flaky'" in reason
    assert "given back 4 times over 100 s" in reason
    assert "bus replay" in reason
    assert "given_back" not in str(parked["signal"])  # a replay starts a new window
    assert len(await harness.tokens()) == 1

    # And a replay once the new version serves the queue processes it once
    fixed = Harness(backend, flaky_app(name, {"left": 0}, mode), harness.config)
    assert await replay(fixed.raw, name) == 1
    await fixed.run_until_quiet()
    assert len(await fixed.applied(name)) == 1
    assert await fixed.tokens_in_flight() == []


@in_memory
async def test_a_window_of_zero_parks_at_once(backend: Backend, mode: Mode) -> None:
    harness = await old_instance(backend, mode, window=0)
    name = await send_flaky(harness)

    await deliver_one(harness, name)

    assert harness.outcomes == {Outcome.POISONED: 1}
    [parked] = await harness.poison_messages(name)
    assert "not given back (BUS_GIVE_BACK_SECONDS is 0)" in str(parked["poison"])


@in_memory
async def test_a_given_back_message_is_processed_by_the_new_version_and_only_once(
    backend: Backend, mode: Mode
) -> None:
    # Given the old instance gave the message back, and the network duplicated the copy
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    [message] = await visible(harness, name)
    await harness.raw.queue(name).send(message.content)
    await deliver_one(harness, name)
    await deliver_one(harness, name)
    assert harness.outcomes[Outcome.GIVEN_BACK] == 2

    # When the new version serves the queue
    upgraded = Harness(backend, flaky_app(name, {"left": 0}, mode), harness.config)
    await upgraded.run_until_quiet()

    # Then it is processed once, nothing parked or left
    assert len(await upgraded.applied(name)) == 1
    assert await upgraded.poison_messages(name) == []
    assert await upgraded.tokens_in_flight() == []


@in_memory
async def test_a_copy_of_a_message_already_processed_is_a_duplicate_not_given_back(
    backend: Backend, mode: Mode
) -> None:
    # Given the new version processed the message, and the network kept a copy of its signal
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    [message] = await visible(harness, name)
    upgraded = Harness(backend, flaky_app(name, {"left": 0}, mode), harness.config)
    await upgraded.run_until_quiet()
    await harness.raw.queue(name).send(message.content)

    # When the old instance gets the copy
    await deliver_one(harness, name)

    # Then it reads the token first and acknowledges the copy: in a window mode the token is
    # gone (a duplicate); in token mode it waits, claimed, for the cleanup's R7, and the
    # committed O(m) with its claim id says the message was processed (resumed, not given
    # back to be parked once its window ran out)
    expected = Outcome.RESUMED if mode == "token" else Outcome.DUPLICATE
    assert harness.outcomes == {expected: 1}
    assert await harness.raw.queue(name).approximate_count() == 0
    assert await harness.raw.queue(poison_queue(name)).approximate_count() == 0


@in_memory
async def test_a_copy_of_a_message_claimed_but_not_committed_is_still_given_back(
    backend: Backend, mode: Mode
) -> None:
    """A claimed token is not proof enough: until O(m) commits, only an instance that reads
    the message can finish it, so the old instance gives the copy back."""
    if mode != "token":
        pytest.skip("only token mode claims the token")
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    [message] = await visible(harness, name)
    signal = json.loads(message.content)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    # A newer instance claimed it and has not committed (it crashed, or is still running).
    stored = await tokens.read(signal["token"])
    await tokens.set_metadata(signal["token"], {**stored.properties.metadata, "claim": "c1"})
    await harness.raw.queue(name).send(message.content)

    await deliver_one(harness, name)

    assert harness.outcomes == {Outcome.GIVEN_BACK: 1}


@in_memory
async def test_a_newer_delayed_message_waits_for_its_due_time_before_it_is_given_back(
    backend: Backend, mode: Mode
) -> None:
    # Given a delayed message of a type the old instance does not know, due in 10 days: its
    # signal comes back after 7 (the queue's longest delay), 3 days early
    harness = await old_instance(backend, mode)
    [name] = harness.app.endpoints
    await (
        new_bus(harness)
        .client()
        .send(Flaky(key="k"), to=name, idempotency_key="k1", delay=timedelta(days=10))
    )
    assert backend.clock is not None
    backend.clock.advance(7 * 24 * 3600)

    # When the old instance receives it
    await deliver_one(harness, name)

    # Then it hides it until its due time, with no give-back counted, and gives it back then
    assert harness.outcomes == {Outcome.DEFERRED: 1}
    backend.clock.advance(3 * 24 * 3600 - 1)
    assert await visible(harness, name) == []
    backend.clock.advance(1)
    [due] = await visible(harness, name)
    assert "given_back" not in due.content
    await deliver_one(harness, name)
    assert harness.outcomes[Outcome.GIVEN_BACK] == 1


@in_memory
async def test_a_delayed_retry_s_count_survives_a_give_back(backend: Backend, mode: Mode) -> None:
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    [message] = await harness.raw.queue(name).receive(1)
    retried = Signal.parse(message.content).model_copy(update={"retry": 2}).to_json()
    await harness.raw.queue(name).delete(message.id, message.pop_receipt)
    await harness.raw.queue(name).send(retried)

    await deliver_one(harness, name)

    assert backend.clock is not None
    backend.clock.advance(FIRST_DELAY)
    [again] = await visible(harness, name)
    assert json.loads(again.content)["retry"] == 2
    assert json.loads(again.content)["given_back"] == 1


@in_memory
async def test_a_give_back_uses_none_of_the_endpoint_s_retries(
    backend: Backend, mode: Mode
) -> None:
    # Given an old instance whose endpoint has a retry policy
    name = f"gb{unique_name('')[:8]}"
    old = BusApp()
    policy = RetryPolicy(immediate=2, delays=(5.0,), jitter=0)
    old.endpoint(name, state=Ledger, mode=mode, retry=policy)
    harness = await Harness.create(backend, old, give_back_seconds=WINDOW)
    await send_flaky(harness)

    # When it receives a message of a type it does not know
    await deliver_one(harness, name)

    # Then it is given back once: no immediate retry read the token again, no delayed retry
    assert harness.outcomes == {Outcome.GIVEN_BACK: 1}
    assert harness.instrumentation.kinds_since(0)["blob.read"] == 1
    assert backend.clock is not None
    backend.clock.advance(FIRST_DELAY)
    [again] = await visible(harness, name)
    assert "retry" not in json.loads(again.content)


@in_memory
async def test_a_failed_re_send_goes_to_the_host_and_loses_nothing(
    backend: Backend, mode: Mode
) -> None:
    # Given the re-send fails
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    harness.instrumentation.plan = fault_at_first("queue.send", Fault.ERROR_BEFORE)

    # When the old instance receives the message
    [message] = await harness.raw.queue(name).receive(1, visibility_timeout=30)
    acknowledged = await harness.workers[name].run_one(message)

    # Then the host gets the error: the copy it holds is released, not acknowledged
    assert not acknowledged
    assert harness.outcomes == {}
    [back] = await visible(harness, name)
    assert back.id == message.id
    assert "given_back" not in back.content
    assert await harness.poison_messages(name) == []


@in_memory
@pytest.mark.parametrize("forged", [10**9, -1, 0, "x", 1.5])
async def test_a_forged_count_that_is_not_one_is_malformed_and_parked(
    backend: Backend, mode: Mode, forged: object
) -> None:
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    [message] = await harness.raw.queue(name).receive(1)
    await harness.raw.queue(name).delete(message.id, message.pop_receipt)
    await harness.raw.queue(name).send(
        json.dumps({**json.loads(message.content), "given_back": forged})
    )

    await deliver_one(harness, name)

    assert harness.outcomes == {Outcome.POISONED: 1}
    [parked] = await harness.poison_messages(name)
    assert "MalformedSignal" in str(parked["poison"])


@in_memory
async def test_a_forged_count_beyond_the_window_parks_at_once(backend: Backend, mode: Mode) -> None:
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    [message] = await harness.raw.queue(name).receive(1)
    await harness.raw.queue(name).delete(message.id, message.pop_receipt)
    forged = {**json.loads(message.content), "given_back": MAX_GIVE_BACKS}
    await harness.raw.queue(name).send(json.dumps(forged))

    await deliver_one(harness, name)

    assert harness.outcomes == {Outcome.POISONED: 1}
    [parked] = await harness.poison_messages(name)
    assert "given back 1000 times over 100 s" in str(parked["poison"])


@in_memory
async def test_a_give_back_is_logged_with_its_outcome(
    backend: Backend, mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)

    with caplog.at_level(logging.INFO, logger="shared.bus.receiver"):
        await deliver_one(harness, name)

    lines = [r.getMessage() for r in caplog.records]
    assert any("outcome=given_back" in line and "type=Flaky" in line for line in lines)
    assert any(
        "given back for an upgraded instance (give-back 1, hidden 10 s)" in line for line in lines
    )


def test_a_give_back_is_counted_as_of_a_message_type_or_of_a_format_by_what_was_newer() -> None:
    """A newer type version is a change of the message type, as an unknown type is; only a
    record's format is a change of the bus."""
    with pytest.raises(NewerVersion) as newer_type_version:
        read_body(Flaky, {}, type_version=2, reader="billing", telemetry=BusTelemetry())
    with pytest.raises(NewerVersion) as newer_format:
        formats.checked(formats.NEWEST + 1, "signal")

    assert kind_of(newer_type_version.value) == "message_type"
    assert kind_of(UnknownMessageType("endpoint billing has no handler")) == "message_type"
    assert kind_of(newer_format.value) == "format"


@in_memory
async def test_a_give_back_is_counted_by_endpoint_and_kind(backend: Backend, mode: Mode) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    harness = await old_instance(backend, mode, meter_provider=meters)
    name = await send_flaky(harness)

    await deliver_one(harness, name)

    data = reader.get_metrics_data()
    points = [
        point
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "bus.messages.given_back"
        for point in metric.data.data_points
    ]
    [point] = points
    assert isinstance(point, NumberDataPoint)
    assert point.value == 1
    attributes = dict(point.attributes or {})
    assert attributes["messaging.destination.name"] == name
    assert attributes["bus.give_back.kind"] == "message_type"
    assert attributes["bus.outcome"] == "given_back"
    meters.shutdown()


@pytest.mark.azurite
@pytest.mark.parametrize("backend", [("azurite", "token")], indirect=True)
async def test_on_azurite_the_given_back_signal_is_hidden_then_processed_by_the_new_version(
    backend: Backend, mode: Mode
) -> None:
    # Given an old and a new instance of one endpoint over one account
    harness = await old_instance(backend, mode)
    name = await send_flaky(harness)
    upgraded = Harness(backend, flaky_app(name, {"left": 0}, mode), harness.config)

    # When the old instance gets the message first
    await deliver_one(harness, name)
    assert harness.outcomes == {Outcome.GIVEN_BACK: 1}

    # Then the real queue hides it for the delay, and the new version then processes it once
    await backend.elapse(FIRST_DELAY - 3)
    assert await harness.raw.queue(name).receive(1) == []
    for _ in range(20):
        await backend.elapse(1)
        if await visible(harness, name):
            break
    await upgraded.run_until_quiet()
    assert upgraded.outcomes == {Outcome.PROCESSED: 1}
    assert len(await upgraded.applied(name)) == 1
    assert await upgraded.tokens_in_flight() == []
    assert await upgraded.poison_messages(name) == []


def test_the_delays_double_up_to_their_cap_and_add_up_to_the_window() -> None:
    window = 3600.0
    steps = [next_step(n, window) for n in range(30)]
    delays = [s.delay for s in steps if s.delay is not None]
    assert delays[:6] == [10.0, 20.0, 40.0, 80.0, 160.0, MAX_DELAY]
    assert max(delays) == MAX_DELAY
    assert sum(delays) == window
    parked = next(s for s in steps if s.delay is None)
    assert parked.waited == window
    assert next_step(MAX_GIVE_BACKS, 86400.0).delay is None  # the bound covers a day


def test_a_signal_too_new_to_parse_keeps_its_text_with_only_its_count_set() -> None:
    newer = {"v": 9, "message_id": "m", "anything": {"new": [1, 2]}}
    data, count = count_of(json.dumps(newer))
    assert count == 0
    again = json.loads(given_back_text(data, 1))
    assert again == {**newer, "given_back": 1}
    data, count = count_of(given_back_text(data, 1))
    assert count == 1
    assert json.loads(afresh_text("", data)) == newer


@pytest.mark.parametrize(
    "raw",
    [
        "[1, 2]",
        "not json",
        '"text"',
        json.dumps({"given_back": "x"}),
        json.dumps({"given_back": 0}),
        json.dumps({"given_back": MAX_GIVE_BACKS + 1}),
        json.dumps({"given_back": True}),
        json.dumps({"v": 9, "pad": "x" * MAX_SIGNAL_CHARS}),
    ],
)
def test_a_too_new_signal_that_is_no_json_object_or_has_a_bad_count_is_malformed(
    raw: str,
) -> None:
    with pytest.raises(MalformedSignal):
        count_of(raw)
