"""Retry policies: a message whose handler fails is retried at once, then later with
backoff, then parked; it is applied once and its outputs are sent once, also under duplicate
deliveries and a crash between retries. ``DoNotRetry`` parks at once.

Every endpoint mode on the in-memory stores; token mode on Azurite (real seconds). A test
lets time pass in short steps until the retry it waits for has run, so that it waits no
longer than the backoff itself."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from shared.bus import BusApp, Command, DoNotRetry, HandlerContext, Outcome, RetryPolicy
from shared.bus.app import Mode
from shared.bus.envelope import Signal
from shared.bus.poison import replay
from shared.errors import ConfigurationError, MalformedSignal
from shared.resources import poison_queue
from shared.stores.instrumented import Fault, fault_at_first
from tests.bus.flow import Ledger
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.waiting import wait_until
from tests.conftest import Backend, unique_name

each_backend = pytest.mark.parametrize("backend", backend_modes(azurite=["token"]), indirect=True)

BACKOFF = (1.0, 2.0)
"""Seconds, without jitter: real waits on Azurite."""
WITHIN = 10.0
"""Seconds a test waits beyond its backoffs before it gives up on a retry."""


class Charge(Command):
    partition_by = "key"
    key: str


class Receipt(Command):
    partition_by = "key"
    key: str


class Refund(Command):
    partition_by = "key"
    key: str


def failing_app(
    name: str,
    mode: Mode,
    failures: dict[str, int],
    policy: RetryPolicy | None,
    refund_policy: RetryPolicy | None = None,
) -> BusApp:
    """``Charge`` fails while ``failures['left']`` is positive, then sends a ``Receipt`` to
    the same endpoint; ``Refund`` always refuses (``DoNotRetry``) or fails."""
    app = BusApp()
    endpoint = app.endpoint(
        name,
        state=Ledger,
        mode=mode,
        retry=policy,
        retry_for={Refund: refund_policy} if refund_policy else None,
    )

    @endpoint.handles(Charge)
    def charge(ctx: HandlerContext[Ledger], cmd: Charge) -> None:
        ctx.state.applied.append("charge")
        failures["runs"] = failures.get("runs", 0) + 1
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError("card network unavailable")
        ctx.send(Receipt(key=cmd.key), to=name)

    @endpoint.handles(Receipt)
    def receipt(ctx: HandlerContext[Ledger], cmd: Receipt) -> None:
        ctx.state.applied.append("receipt")

    @endpoint.handles(Refund)
    def refund(ctx: HandlerContext[Ledger], cmd: Refund) -> None:
        failures["refund_runs"] = failures.get("refund_runs", 0) + 1
        if failures.get("refuse"):
            raise DoNotRetry("order was never charged")
        raise RuntimeError("refunds are down")

    return app


async def setup(
    backend: Backend,
    mode: Mode,
    failing: int,
    policy: RetryPolicy | None,
    refund_policy: RetryPolicy | None = None,
) -> tuple[Harness, str, dict[str, int]]:
    name = f"retry{unique_name('')[:8]}"
    failures = {"left": failing}
    app = failing_app(name, mode, failures, policy, refund_policy)
    harness = await Harness.create(backend, app, jitter=random.Random(7))
    return harness, name, failures


async def deliver_visible(harness: Harness, name: str) -> Counter[Outcome]:
    """Deliver what is visible now (and what that makes visible now), without waiting."""
    before = Counter(harness.outcomes)
    while messages := await harness.raw.queue(name).receive(32, visibility_timeout=30):
        for message in messages:
            await harness.deliver(name, message)
    return harness.outcomes - before


async def deliver_until(
    harness: Harness, name: str, done: Callable[[], Awaitable[bool]], *, within: float
) -> Counter[Outcome]:
    """Deliver what becomes visible as time passes until ``done()``; returns the outcomes."""
    outcomes: Counter[Outcome] = Counter()

    async def delivered() -> bool:
        outcomes.update(await deliver_visible(harness, name))
        return await done()

    await wait_until(harness, delivered, within=within)
    return outcomes


def queue_empty(harness: Harness, name: str) -> Callable[[], Awaitable[bool]]:
    """No signal left in ``name``'s queue, visible or hidden: nothing more will happen."""

    async def empty() -> bool:
        return await harness.raw.queue(name).approximate_count() == 0

    return empty


async def ledger(harness: Harness, name: str) -> list[str]:
    return (await harness.state(name, "k")).applied


async def send_charge(harness: Harness, name: str) -> None:
    await harness.setup_bus.client().send(Charge(key="k"), to=name, idempotency_key="c")


@each_backend
async def test_immediate_retries_run_within_the_delivery_and_apply_once(
    backend: Backend, mode: Mode
) -> None:
    # Given a handler that fails twice, under two immediate retries
    harness, name, failures = await setup(backend, mode, 2, RetryPolicy(immediate=2))
    await send_charge(harness, name)

    # When its message is delivered once
    outcomes = await deliver_visible(harness, name)

    # Then the third run succeeded, was applied once, and its output was processed once
    assert failures["runs"] == 3
    assert outcomes == Counter({Outcome.PROCESSED: 2})
    assert await ledger(harness, name) == ["charge", "receipt"]


@each_backend
async def test_delayed_retries_wait_their_backoff_and_apply_once(
    backend: Backend, mode: Mode
) -> None:
    # Given a handler that fails four times, under 1 immediate and 2 delayed retries
    policy = RetryPolicy(immediate=1, delays=BACKOFF, jitter=0)
    harness, name, failures = await setup(backend, mode, 4, policy)
    await send_charge(harness, name)

    # When delivered: two runs fail, a retry is scheduled; nothing is visible before it
    clock = harness.config.clock
    first_delivery = clock()
    assert await deliver_visible(harness, name) == Counter({Outcome.RETRYING: 1})
    assert failures["runs"] == 2
    assert await harness.raw.queue(name).peek() == []

    # And the first delayed retry runs (and fails twice) no sooner than its backoff
    async def ran(runs: int) -> bool:
        return failures["runs"] >= runs

    retried = await deliver_until(harness, name, lambda: ran(4), within=BACKOFF[0] + WITHIN)
    assert retried == Counter({Outcome.RETRYING: 1})
    assert failures["runs"] == 4
    assert clock() - first_delivery >= BACKOFF[0]

    # Then the second one, no sooner than both backoffs, succeeds: applied once, its output
    # sent once
    done = await deliver_until(
        harness, name, queue_empty(harness, name), within=BACKOFF[1] + WITHIN
    )
    assert done == Counter({Outcome.PROCESSED: 2})
    assert failures["runs"] == 5
    assert clock() - first_delivery >= BACKOFF[0] + BACKOFF[1]
    assert await ledger(harness, name) == ["charge", "receipt"]
    assert await harness.tokens_in_flight() == []


@each_backend
async def test_retries_used_up_park_the_message_and_a_replay_starts_afresh(
    backend: Backend, mode: Mode
) -> None:
    # Given a handler that fails more often than its policy retries
    policy = RetryPolicy(immediate=0, delays=(1.0,), jitter=0)
    harness, name, failures = await setup(backend, mode, 2, policy)
    await send_charge(harness, name)
    await deliver_visible(harness, name)

    # When the last retry fails too
    async def parked_one() -> bool:
        return await harness.raw.queue(poison_queue(name)).approximate_count() == 1

    outcomes = await deliver_until(harness, name, parked_one, within=1.0 + WITHIN)
    assert outcomes == Counter({Outcome.POISONED: 1})

    # Then it is parked with its reason and without its retry number
    [parked] = await harness.poison_messages(name)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    assert reason["error_type"] == "RuntimeError"
    assert "card network unavailable" in reason["reason"]
    assert "after 0 immediate and 1 delayed retries" in reason["reason"]
    assert "retry" not in json.loads(str(parked["signal"]))
    assert await ledger(harness, name) == []

    # And a replay runs the policy again from the start, applying it once in the end
    await replay(harness.raw, name)
    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 2})
    assert failures["runs"] == 3
    assert await ledger(harness, name) == ["charge", "receipt"]


@each_backend
async def test_do_not_retry_parks_at_once_whatever_the_policy(backend: Backend, mode: Mode) -> None:
    harness, name, failures = await setup(backend, mode, 0, RetryPolicy.exponential())
    failures["refuse"] = 1
    await harness.setup_bus.client().send(Refund(key="k"), to=name, idempotency_key="r")

    assert await deliver_visible(harness, name) == Counter({Outcome.POISONED: 1})

    assert failures["refund_runs"] == 1
    [parked] = await harness.poison_messages(name)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    assert reason["error_type"] == "DoNotRetry"
    assert "order was never charged (not retried)" in reason["reason"]


@each_backend
async def test_a_message_type_can_have_its_own_policy(backend: Backend, mode: Mode) -> None:
    # Refund has no immediate retries and no delayed ones: parked at its first failure,
    # while the endpoint's policy would have run it three times
    harness, name, failures = await setup(
        backend, mode, 0, RetryPolicy(immediate=2), refund_policy=RetryPolicy()
    )
    await harness.setup_bus.client().send(Refund(key="k"), to=name, idempotency_key="r")

    assert await deliver_visible(harness, name) == Counter({Outcome.POISONED: 1})
    assert failures["refund_runs"] == 1


@each_backend
async def test_duplicate_deliveries_under_retries_apply_once(backend: Backend, mode: Mode) -> None:
    # Given a failing message whose signal arrives twice
    policy = RetryPolicy(immediate=0, delays=BACKOFF, jitter=0)
    harness, name, failures = await setup(backend, mode, 3, policy)
    await send_charge(harness, name)
    [copy] = await harness.raw.queue(name).peek()
    await harness.raw.queue(name).send(copy.content)

    # When both copies fail and retry on their own, until the handler succeeds and no signal
    # is left
    await deliver_until(harness, name, queue_empty(harness, name), within=sum(BACKOFF) + WITHIN)

    # Then it was applied once and its output sent once
    assert failures["left"] == 0
    assert await ledger(harness, name) == ["charge", "receipt"]
    assert await harness.poison_messages(name) == []
    assert await harness.raw.queue(name).approximate_count() == 0


@each_backend
@pytest.mark.parametrize("fault", [Fault.CRASH_AFTER, Fault.CRASH_BEFORE])
async def test_a_crash_around_scheduling_a_retry_neither_loses_nor_duplicates(
    backend: Backend, mode: Mode, fault: Fault
) -> None:
    # Given a handler that fails twice, under delayed retries only
    policy = RetryPolicy(immediate=0, delays=(1.0, 1.0, 1.0), jitter=0)
    harness, name, failures = await setup(backend, mode, 2, policy)
    await send_charge(harness, name)

    # When the receiver crashes just before or after sending the retry's signal (the copy
    # it holds comes back, and fails again)
    harness.instrumentation.plan = fault_at_first("queue.send", fault)
    await deliver_visible(harness, name)
    harness.instrumentation.plan = lambda op: None
    assert harness.crashes == 1
    await deliver_until(harness, name, queue_empty(harness, name), within=3.0 + WITHIN)

    # Then it was applied once and its output sent once, nothing parked or left
    assert failures["left"] == 0
    assert await ledger(harness, name) == ["charge", "receipt"]
    assert await harness.poison_messages(name) == []
    assert await harness.tokens_in_flight() == []


def test_a_signal_s_retry_number_is_bounded() -> None:
    base = {
        "message_id": "0f0e0d0c-0b0a-4908-8706-050403020100",
        "attempt_id": "1f0e0d0c-0b0a-4908-8706-050403020100",
        "token": "client/2f0e0d0c-0b0a-4908-8706-050403020100/"
        "1f0e0d0c-0b0a-4908-8706-050403020100/0f0e0d0c-0b0a-4908-8706-050403020100",
        "partition_key": "p",
    }
    assert Signal.parse(json.dumps({**base, "retry": 3})).retry == 3
    for bad in (0, -1, 101, 10**30, 2.5):
        with pytest.raises(MalformedSignal, match="retry"):
            Signal.parse(json.dumps({**base, "retry": bad}))


def test_policies_are_checked_and_backoff_is_exponential_with_jitter() -> None:
    policy = RetryPolicy.exponential(immediate=1, first=10, factor=6, count=3)
    assert policy.delays == (10.0, 60.0, 360.0)
    rng = random.Random(1)
    drawn = [policy.delay(i, rng) for i in range(3)]
    for got, nominal in zip(drawn, policy.delays, strict=True):
        assert got is not None
        assert nominal * 0.8 <= got <= nominal * 1.2
    assert len({d / n for d, n in zip(drawn, policy.delays, strict=True) if d}) == 3
    assert policy.delay(3, rng) is None
    for bad in (
        {"immediate": -1},
        {"immediate": 11},
        {"delays": (0.5,)},
        {"delays": (8 * 24 * 3600.0,)},
        {"jitter": 1.0},
    ):
        with pytest.raises(ConfigurationError):
            RetryPolicy(**bad)
