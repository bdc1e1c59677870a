"""Sagas (shared/bus/saga.py): only the starting types create an instance, any other message
for a missing or completed instance is ``saga_not_found`` (its not-found handler runs if
declared) and writes nothing of the instance, ``ctx.complete()`` ends the instance in the
handler's commit, and ``ctx.reply`` reaches the instance that asked.

Token mode, in memory, on Azurite, and with the rows in PostgreSQL (the model and a real
server)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext, Outcome
from shared.bus.app import Endpoint, Mode, NoState
from shared.bus.handles import MessageHandle
from shared.bus.saga import SAGA_ROW_TYPE, SagaRow
from shared.cleanup.job import endpoint_modes, run_cleanup, saga_endpoints
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.cli.records import count_records
from shared.errors import ConfigurationError
from tests.bus.harness import (
    Harness,
    document_backends,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
    sql_backends,
)
from tests.bus.waiting import wait_until
from tests.conftest import Backend, unique_name

SAGA_MODES: tuple[Mode, ...] = ("token", "processed_messages")
pytestmark = pytest.mark.parametrize(
    "backend",
    [
        *(pytest.param(("memory", m), id=f"memory-{m}") for m in SAGA_MODES),
        *(
            pytest.param(("azurite", m), id=f"azurite-{m}", marks=pytest.mark.azurite)
            for m in SAGA_MODES
        ),
        *sql_backends(SAGA_MODES),
        *document_backends(SAGA_MODES, real=["token"]),
    ],
    indirect=True,
)


class StartCheckout(Command):
    partition_by = "order_id"
    order_id: str


class PaymentReceived(Command):
    partition_by = "order_id"
    order_id: str


class Shipped(Command):
    partition_by = "order_id"
    order_id: str


class ChargeCard(Command):
    """Routed by card: the payments endpoint's partition is not the saga's instance."""

    partition_by = "card"
    card: str


class CardCharged(Command):
    """A reply with no correlation property of its own: only the reply header can bring it
    to the instance that asked."""

    card: str


class Orphaned(Command):
    partition_by = "order_id"
    order_id: str
    type: str


class Checkout(BaseModel):
    seen: list[str] = []


def checkout_app(saga: str, payments: str, mode: Mode, *, not_found: bool = False) -> BusApp:
    app = BusApp()
    checkout = app.saga(saga, Checkout, started_by=[StartCheckout], mode=mode)
    pay: Endpoint[NoState] = app.endpoint(payments)

    @checkout.handles(StartCheckout)
    def start(ctx: HandlerContext[Checkout], msg: StartCheckout) -> None:
        ctx.state.seen.append("start")
        ctx.send(ChargeCard(card=f"card-of-{msg.order_id}"), to=payments)

    @checkout.handles(PaymentReceived)
    def paid(ctx: HandlerContext[Checkout], msg: PaymentReceived) -> None:
        ctx.state.seen.append("paid")

    @checkout.handles(CardCharged)
    def charged(ctx: HandlerContext[Checkout], msg: CardCharged) -> None:
        ctx.state.seen.append(f"charged:{msg.card}")

    @checkout.handles(Shipped)
    def shipped(ctx: HandlerContext[Checkout], msg: Shipped) -> None:
        ctx.complete()

    @checkout.handles(Orphaned)
    def orphaned(ctx: HandlerContext[Checkout], msg: Orphaned) -> None:
        ctx.state.seen.append("orphaned")

    if not_found:

        @checkout.not_found(PaymentReceived)
        def refund(ctx: HandlerContext[Checkout], msg: PaymentReceived) -> None:
            ctx.send(Orphaned(order_id=msg.order_id, type="PaymentReceived"), to=saga)

    @pay.handles(ChargeCard)
    def charge(ctx: HandlerContext[Any], msg: ChargeCard) -> None:
        ctx.reply(CardCharged(card=msg.card))

    app.check()
    return app


async def started(backend: Backend, mode: Mode, *, not_found: bool = False) -> tuple[Harness, str]:
    saga = f"checkout{unique_name('')[:8]}"
    harness = await Harness.create(
        backend, checkout_app(saga, f"pay{saga[8:]}", mode, not_found=not_found)
    )
    return harness, saga


async def send(harness: Harness, saga: str, message: Command, key: str) -> None:
    await harness.setup_bus.client().send(message, to=saga, idempotency_key=key)


async def instance(harness: Harness, saga: str, order: str) -> SagaRow | None:
    async for row in harness.rows(saga).states():
        if row.partition_key == order:
            assert row.type == SAGA_ROW_TYPE
            return SagaRow.model_validate_json(row.data)
    return None


async def audit_outcomes(harness: Harness, saga: str) -> Counter[str]:
    return Counter(
        [str(e.get("outcome", "processed")) async for e in harness.rows(saga).audit_entities()]
    )


async def test_a_start_creates_the_instance_and_the_reply_reaches_it(
    backend: Backend, mode: Mode
) -> None:
    harness, saga = await started(backend, mode)
    await send(harness, saga, StartCheckout(order_id="o1"), "start-o1")
    await send(harness, saga, PaymentReceived(order_id="o1"), "paid-o1")
    await harness.run_until_quiet()
    # The saga runs in the mode it declares: its own records are that mode's.
    assert harness.app.endpoints[saga].mode == mode
    records = await count_records(harness.app.endpoints[saga], harness.rows(saga))
    assert ("processed_rows" in records) == (mode == "processed_messages")
    row = await instance(harness, saga, "o1")
    assert row is not None
    assert not row.completed
    assert row.state is not None
    assert sorted(row.state["seen"]) == ["charged:card-of-o1", "paid", "start"]
    # The reply carried no correlation of its own: the payments partition is the card's.
    assert await instance(harness, saga, "card-of-o1") is None
    assert await audit_outcomes(harness, saga) == Counter(processed=3)


async def test_a_message_for_no_instance_is_saga_not_found_and_writes_nothing(
    backend: Backend,
    mode: Mode,
) -> None:
    harness, saga = await started(backend, mode)
    await send(harness, saga, PaymentReceived(order_id="never"), "paid-never")
    await harness.run_until_quiet()
    assert await instance(harness, saga, "never") is None
    assert harness.outcomes[Outcome.SAGA_NOT_FOUND] == 1
    assert await audit_outcomes(harness, saga) == Counter(saga_not_found=1)
    assert await harness.poison_messages(saga) == []


async def test_complete_ends_the_instance_and_nothing_starts_it_again(
    backend: Backend, mode: Mode
) -> None:
    harness, saga = await started(backend, mode)
    await send(harness, saga, StartCheckout(order_id="o2"), "start-o2")
    await harness.run_until_quiet()
    await send(harness, saga, Shipped(order_id="o2"), "shipped-o2")
    await harness.run_until_quiet()
    row = await instance(harness, saga, "o2")
    assert row is not None
    assert row.completed
    assert row.state is None
    # A later message, and a later *starting* message under a new key, find it completed.
    await send(harness, saga, PaymentReceived(order_id="o2"), "paid-o2")
    await send(harness, saga, StartCheckout(order_id="o2"), "start-o2-again")
    await harness.run_until_quiet()
    after = await instance(harness, saga, "o2")
    assert after == row
    outcomes = await audit_outcomes(harness, saga)
    assert outcomes["saga_not_found"] == 2


async def test_a_redelivered_start_after_completion_is_a_duplicate(
    backend: Backend, mode: Mode
) -> None:
    harness, saga = await started(backend, mode)
    await send(harness, saga, StartCheckout(order_id="o3"), "start-o3")
    queue = harness.raw.queue(saga)
    [first] = await queue.receive(1, visibility_timeout=30)
    copy = first.content
    await harness.deliver(saga, first)
    await harness.run_until_quiet()  # the charge and its reply
    await send(harness, saga, Shipped(order_id="o3"), "shipped-o3")
    await harness.run_until_quiet()
    await queue.send(copy)  # the starting message's signal again, as a redelivery would
    await harness.run_until_quiet()
    row = await instance(harness, saga, "o3")
    assert row is not None
    assert row.completed
    assert (await audit_outcomes(harness, saga))["processed"] == 3  # start, reply, shipped


async def test_a_not_found_handler_runs_and_sends_without_an_instance(
    backend: Backend, mode: Mode
) -> None:
    harness, saga = await started(backend, mode, not_found=True)
    await send(harness, saga, PaymentReceived(order_id="lost"), "paid-lost")
    await harness.run_until_quiet()
    # The handler's Orphaned went out, and itself found no instance either.
    assert await instance(harness, saga, "lost") is None
    assert await audit_outcomes(harness, saga) == Counter(saga_not_found=2)


async def test_complete_outside_an_instance_and_a_reply_to_a_client_are_parked(
    backend: Backend,
    mode: Mode,
) -> None:
    saga = f"checkout{unique_name('')[:8]}"
    app = BusApp()
    plain: Endpoint[NoState] = app.endpoint(saga, mode=mode)

    @plain.handles(PaymentReceived)
    def completes(ctx: HandlerContext[Any], msg: PaymentReceived) -> None:
        ctx.complete()

    @plain.handles(Shipped)
    def replies(ctx: HandlerContext[Any], msg: Shipped) -> None:
        ctx.reply(Shipped(order_id=msg.order_id))

    harness = await Harness.create(backend, app)
    await send(harness, saga, PaymentReceived(order_id="x"), "k1")
    await send(harness, saga, Shipped(order_id="x"), "k2")
    await harness.run_until_quiet()
    parked = [p["poison"] for p in await harness.poison_messages(saga)]
    reasons = {str(p["error_type"]): str(p["reason"]) for p in parked if isinstance(p, dict)}
    assert sorted(reasons) == ["NoReplyAddress", "NotASaga"], parked
    assert "which is not a saga" in reasons["NotASaga"]
    assert "no endpoint to reply to" in reasons["NoReplyAddress"]


def test_a_saga_refuses_another_mode_and_unhandled_or_miscorrelated_types(
    backend: Backend,
    mode: Mode,
) -> None:
    app = BusApp()
    refusals: tuple[Mode, ...] = ("state_based", "entity_outbox")
    for refused in refusals:
        with pytest.raises(ConfigurationError, match=f"mode '{refused}' cannot run a saga"):
            app.saga("checkouta", Checkout, started_by=[StartCheckout], mode=refused)
    with pytest.raises(ConfigurationError, match="partition_by"):
        app.saga(
            "checkoutb", Checkout, started_by=[StartCheckout], correlate={ChargeCard: "order_id"}
        )
    app.saga("checkoutc", Checkout, started_by=[StartCheckout])
    with pytest.raises(ConfigurationError, match="started_by names"):
        app.check()
    with pytest.raises(ConfigurationError, match="not a saga"):
        app.endpoint("plainone").not_found(StartCheckout)


async def test_the_cleanup_retires_a_completed_marker_after_its_retention(
    backend: Backend,
    mode: Mode,
) -> None:
    harness, saga = await started(backend, mode)
    await send(harness, saga, StartCheckout(order_id="o4"), "start-o4")
    await send(harness, saga, StartCheckout(order_id="o5"), "start-o5")
    await harness.run_until_quiet()
    await send(harness, saga, Shipped(order_id="o4"), "shipped-o4")
    await harness.run_until_quiet()

    async def cleanup() -> CleanupReport:
        return await run_cleanup(
            harness.raw,
            endpoint_modes(harness.app),
            rows=harness.cleanup_rows(),
            config=harness.config,
            settings=CleanupSettings(grace_seconds=0.0),
            sagas=saga_endpoints(harness.app),
        )

    def task(report: CleanupReport) -> TaskReport:
        [found] = [t for t in report.tasks if t.task == f"sagas.{saga}"]
        return found

    kept = task(await cleanup())
    assert kept.kept["completed_in_retention"] == 1
    assert kept.kept["live_instances"] == 1
    assert (await instance(harness, saga, "o4")) is not None
    harness.config = replace(harness.config, saga_retention_seconds=0.0)
    removed = task(await cleanup())
    assert removed.removed["completed_instances"] == 1
    assert await instance(harness, saga, "o4") is None
    live = await instance(harness, saga, "o5")
    assert live is not None
    assert not live.completed
    # Past its retention the correlation value is free again: a start begins a new instance.
    await send(harness, saga, StartCheckout(order_id="o4"), "start-o4-later")
    await harness.run_until_quiet()
    again = await instance(harness, saga, "o4")
    assert again is not None
    assert not again.completed


# --- timeouts ---------------------------------------------------------------------------------

TIMEOUT_SECONDS = 2.0
"""Whole seconds (the queue hides messages for whole seconds); real seconds on Azurite."""


class Open(Command):
    partition_by = "ref"
    ref: str


class Remind(Command):
    """The instance's timeout; no correlation property: it reaches the instance that asked."""

    note: str


class Settle(Command):
    partition_by = "ref"
    ref: str
    cancel_first: bool = False


class Reminders(BaseModel):
    reminded: list[str] = []
    deadline: MessageHandle | None = None


def reminder_app(saga: str, mode: Mode) -> BusApp:
    """``Open`` asks for two timeouts; ``Settle`` cancels the first (when asked) and
    completes the instance, which cancels whatever is still pending."""
    app = BusApp()
    reminders = app.saga(saga, Reminders, started_by=[Open], mode=mode)

    @reminders.handles(Open)
    def opened(ctx: HandlerContext[Reminders], msg: Open) -> None:
        delay = timedelta(seconds=TIMEOUT_SECONDS)
        ctx.state.deadline = ctx.request_timeout(Remind(note="first"), delay=delay)
        ctx.request_timeout(Remind(note="second"), delay=delay)

    @reminders.handles(Remind)
    def reminded(ctx: HandlerContext[Reminders], msg: Remind) -> None:
        ctx.state.reminded.append(msg.note)

    @reminders.handles(Settle)
    def settled(ctx: HandlerContext[Reminders], msg: Settle) -> None:
        if msg.cancel_first and ctx.state.deadline is not None:
            ctx.cancel(ctx.state.deadline)
        else:
            ctx.complete()

    return app


async def deliver_visible(harness: Harness, saga: str) -> None:
    """Deliver what the queue shows now (and what that shows now), letting no time pass:
    ``run_until_quiet`` would move a manual clock past the timeouts."""
    while messages := await harness.raw.queue(saga).receive(32, visibility_timeout=30):
        for message in messages:
            await harness.deliver(saga, message)


async def opened_reminders(backend: Backend, mode: Mode) -> tuple[Harness, str]:
    saga = f"remind{unique_name('')[:8]}"
    harness = await Harness.create(backend, reminder_app(saga, mode))
    await send(harness, saga, Open(ref="r1"), "open-r1")
    await deliver_visible(harness, saga)
    return harness, saga


async def drain_after_timeouts(harness: Harness, saga: str) -> None:
    """Let the timeouts' due time pass, then deliver until every queue is empty."""
    await harness.backend.elapse(TIMEOUT_SECONDS + 1)

    async def quiet() -> bool:
        await harness.run_until_quiet()
        return await harness.raw.queue(saga).approximate_count() == 0

    await wait_until(harness, quiet, within=TIMEOUT_SECONDS + 10)


async def test_timeouts_are_pending_until_they_fire(backend: Backend, mode: Mode) -> None:
    harness, saga = await opened_reminders(backend, mode)
    row = await instance(harness, saga, "r1")
    assert row is not None
    assert sorted(t.type for t in row.timeouts) == ["Remind", "Remind"]

    await drain_after_timeouts(harness, saga)

    row = await instance(harness, saga, "r1")
    assert row is not None
    assert row.state is not None
    assert sorted(row.state["reminded"]) == ["first", "second"]
    assert row.timeouts == ()


async def test_a_cancelled_timeout_never_fires(backend: Backend, mode: Mode) -> None:
    harness, saga = await opened_reminders(backend, mode)
    await send(harness, saga, Settle(ref="r1", cancel_first=True), "cancel-r1")
    await deliver_visible(harness, saga)
    if mode != "token":
        # Cancelling needs a token claim: refused before anything is written, and parked.
        [parked] = await harness.poison_messages(saga)
        reason = parked["poison"]
        assert isinstance(reason, dict)
        assert reason["error_type"] == "CancelRefused"
        return
    row = await instance(harness, saga, "r1")
    assert row is not None
    assert [t.type for t in row.timeouts] == ["Remind"]  # the second, still pending

    await drain_after_timeouts(harness, saga)

    row = await instance(harness, saga, "r1")
    assert row is not None
    assert row.state is not None
    assert row.state["reminded"] == ["second"]
    assert (await audit_outcomes(harness, saga))["cancelled"] == 1


async def test_completing_cancels_the_pending_timeouts(backend: Backend, mode: Mode) -> None:
    harness, saga = await opened_reminders(backend, mode)
    await send(harness, saga, Settle(ref="r1"), "settle-r1")
    await deliver_visible(harness, saga)
    row = await instance(harness, saga, "r1")
    assert row is not None
    assert row.completed
    assert row.timeouts == ()

    await drain_after_timeouts(harness, saga)

    outcomes = await audit_outcomes(harness, saga)
    if mode == "token":
        # Both cancelled: neither was ever processed, not even as saga_not_found.
        assert outcomes["cancelled"] == 2
        assert outcomes["saga_not_found"] == 0
    else:
        # No cancellation in this mode: the timeouts fire and find the instance completed.
        assert outcomes["cancelled"] == 0
        assert outcomes["saga_not_found"] == 2
    assert await harness.tokens_in_flight() == []


async def test_request_timeout_outside_an_instance_is_parked(backend: Backend, mode: Mode) -> None:
    saga = f"plain{unique_name('')[:8]}"
    app = BusApp()
    plain: Endpoint[NoState] = app.endpoint(saga, mode=mode)

    @plain.handles(Open)
    def asks(ctx: HandlerContext[Any], msg: Open) -> None:
        ctx.request_timeout(Remind(note="x"), delay=timedelta(seconds=1))

    harness = await Harness.create(backend, app)
    await send(harness, saga, Open(ref="x"), "k1")
    await harness.run_until_quiet()
    [parked] = await harness.poison_messages(saga)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    assert reason["error_type"] == "NotASaga"
