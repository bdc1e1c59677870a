"""Cancels as an attacker writes them (issue 46): a forged cancel from another sender, a cancel
naming another endpoint's message, garbage handle fields, a key of another scope, a cancel to
an endpoint that cannot take one. None cancels anything; each cancel message is parked with
its reason, and the message it named is processed when due, once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.app import Endpoint, NoState
from shared.bus.client_cancel import cancel_by_key
from shared.bus.envelope import Envelope, Signal, token_name
from shared.bus.handles import CancelScheduled, MessageHandle
from shared.bus.ids import fresh_id
from shared.clock import to_datetime
from shared.errors import CancelRefused, ConfigurationError
from shared.resources import poison_queue
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize(
    "backend",
    [p for p in backend_modes(azurite=["token"], sql=False) if p.values[0][1] == "token"],
    indirect=True,
)


class Start(Command):
    partition_by = "key"
    key: str


class Remind(Command):
    partition_by = "key"
    key: str


class Stop(Command):
    partition_by = "key"
    key: str


class Timers(BaseModel):
    applied: list[str] = []
    reminder: MessageHandle | None = None


class Names:
    def __init__(self) -> None:
        suffix = unique_name("")[:8]
        self.timers = f"timers{suffix}"
        self.other = f"other{suffix}"
        self.window = f"window{suffix}"


def hostile_app(names: Names, forge: str) -> BusApp:
    """``Start`` at timers sends a delayed ``Remind`` to other (a token-mode endpoint) and keeps
    its handle; ``Stop`` cancels it with the handle as ``forge`` alters it."""
    app = BusApp()
    timers = app.endpoint(names.timers, state=Timers)
    other = app.endpoint(names.other, state=Timers)
    window = app.endpoint(names.window, state=Timers, mode="processed_messages")

    @timers.handles(Start)
    def start(ctx: HandlerContext[Timers], cmd: Start) -> None:
        remind = Remind(key=cmd.key)
        ctx.state.reminder = ctx.send(remind, to=names.other, delay=timedelta(hours=1))

    @timers.handles(Stop)
    def stop(ctx: HandlerContext[Timers], cmd: Stop) -> None:
        handle = ctx.state.reminder
        assert handle is not None  # the test's own state, set by Start
        altered = {
            "none": {},
            "destination": {"destination": names.timers},
            "sender": {"sender": names.other},
            "window": {"destination": names.window},
        }[forge]
        ctx.cancel(handle.model_copy(update=altered))

    for endpoint in (other, window):

        @endpoint.handles(Remind)
        def remind(ctx: HandlerContext[Timers], cmd: Remind) -> None:
            ctx.state.applied.append("remind")

    return app


async def deliver_visible(harness: Harness) -> None:
    """Deliver every message visible now at every endpoint, and those the deliveries make
    visible, without letting time pass (the reminder is due in an hour)."""
    busy = True
    while busy:
        busy = False
        for endpoint in harness.app.endpoints:
            for message in await harness.raw.queue(endpoint).receive(32, visibility_timeout=30):
                busy = True
                await harness.deliver(endpoint, message)


async def started(backend: Backend, forge: str) -> tuple[Harness, Names, MessageHandle]:
    names = Names()
    harness = await Harness.create(backend, hostile_app(names, forge))
    await harness.setup_bus.client().send(Start(key="k"), to=names.timers, idempotency_key="s")
    await deliver_visible(harness)
    handle = (await harness.applied_state(names.timers, "k", Timers)).reminder
    assert handle is not None
    return harness, names, handle


async def parked_reason(harness: Harness, endpoint: str) -> str:
    [parked] = await harness.poison_messages(endpoint)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    return f"{reason['error_type']}| {reason['reason']}"


async def still_pending(harness: Harness, names: Names, handle: MessageHandle) -> None:
    """The reminder was neither cancelled nor processed: no O(t), its token unclaimed."""
    records = await harness.outbox_records(names.other)
    assert [r for r in records if r.message_id == handle.message_id] == []
    assert (await harness.applied_state(names.other, "k", Timers)).applied == []
    pending = [t for t in await harness.tokens_in_flight() if handle.message_id in t]
    assert len(pending) == 1


async def test_a_cancel_forged_by_another_sender_is_parked_and_cancels_nothing(
    backend: Backend,
) -> None:
    # Given a reminder timers sent to other, and a client that forges timers's cancel of it
    harness, names, handle = await started(backend, "none")
    forged = CancelScheduled.of(handle)
    await harness.setup_bus.client().send(forged, to=names.other, idempotency_key="forged")

    # When other receives it
    await deliver_visible(harness)

    # Then it is parked with the reason, and the reminder still waits for its time
    reason = await parked_reason(harness, names.other)
    assert reason.startswith("CancelRefused| CancelRefused: a cancel sent by ingress names")
    assert "only the sender of a message may cancel it" in reason
    await still_pending(harness, names, handle)


async def test_a_forged_sender_field_only_reaches_the_forger_s_own_tokens(
    backend: Backend,
) -> None:
    # Given a client's cancel that names itself as the sender of timers's reminder
    harness, names, handle = await started(backend, "none")
    forged = CancelScheduled.of(handle.model_copy(update={"sender": "ingress"}))
    await harness.setup_bus.client().send(forged, to=names.other, idempotency_key="forged")

    # When other receives it, it finds no such message among the client's own tokens
    await deliver_visible(harness)
    assert await harness.poison_messages(names.other) == []
    await still_pending(harness, names, handle)


async def test_a_cancel_naming_another_endpoint_s_message_is_parked(backend: Backend) -> None:
    # Given timers's handler cancelling its reminder to other at timers itself
    harness, names, handle = await started(backend, "destination")

    # When timers runs Stop and receives the cancel
    await harness.setup_bus.client().send(Stop(key="k"), to=names.timers, idempotency_key="t")
    await deliver_visible(harness)

    # Then the cancel is parked: the message is addressed to other, not timers
    reason = await parked_reason(harness, names.timers)
    assert f"is addressed to {names.other}, not {names.timers}" in reason
    await still_pending(harness, names, handle)


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        ("sender", "only the sender of a message may cancel it"),
        ("window", "whose mode is processed_messages"),
    ],
)
async def test_a_handler_s_cancel_that_cannot_be_carried_out_parks_its_message(
    backend: Backend, forge: str, why: str
) -> None:
    harness, names, handle = await started(backend, forge)
    await harness.setup_bus.client().send(Stop(key="k"), to=names.timers, idempotency_key="t")
    await deliver_visible(harness)
    reason = await parked_reason(harness, names.timers)
    assert reason.startswith("CancelRefused| ")
    assert why in reason
    await still_pending(harness, names, handle)
    # Refused before the commit: no cancel was ever sent
    assert await harness.raw.queue(poison_queue(names.other)).approximate_count() == 0


@pytest.mark.parametrize(
    "garbage",
    [
        {"sender": "../tokens"},
        {"incoming_id": "not-an-id"},
        {"message_id": "'; drop table"},
        {"partition": ""},
    ],
)
async def test_garbage_in_a_cancel_is_a_schema_error_whoever_sends_it(
    backend: Backend, garbage: dict[str, str]
) -> None:
    harness, names, handle = await started(backend, "none")
    fields = {**CancelScheduled.of(handle).model_dump(), **garbage}
    with pytest.raises(ValidationError):
        CancelScheduled.model_validate(fields)
    with pytest.raises(ValidationError):
        MessageHandle.model_validate({**handle.model_dump(), **garbage})
    # Written past the model's checks (a sender of another version, or bytes on the wire)
    forged = CancelScheduled.model_construct(**fields)
    if garbage.get("partition") == "":
        return  # no message goes to an empty partition: refused before anything is written
    await harness.setup_bus.client().send(forged, to=names.other, idempotency_key="g")
    await deliver_visible(harness)
    assert (await parked_reason(harness, names.other)).startswith("MessageSchemaError| ")
    await still_pending(harness, names, handle)


async def test_a_key_sent_in_another_scope_is_not_found(backend: Backend) -> None:
    names = Names()
    harness = await Harness.create(backend, hostile_app(names, "none"), ingress_key_scopes=True)
    alice = harness.setup_bus.client("http", scope="http:alice", legacy=False)
    receipt = await alice.send(
        Remind(key="k"), to=names.other, idempotency_key="r", delay=timedelta(hours=1)
    )
    for scope in ("http:bob", "http", "cli"):
        assert await cancel_by_key(harness.bus, "r", sender="http", scope=scope) is None
    answer = await cancel_by_key(harness.bus, "r", sender="http", scope="http:alice")
    assert answer is not None
    assert answer.results == {receipt.message_ids[0]: answer.results[receipt.message_ids[0]]}
    assert answer.outcome == "cancelled"


async def test_a_client_cancel_of_a_message_to_a_window_mode_endpoint_is_refused(
    backend: Backend,
) -> None:
    names = Names()
    harness = await Harness.create(backend, hostile_app(names, "none"))
    await harness.setup_bus.client().send(
        Remind(key="k"), to=names.window, idempotency_key="w", delay=timedelta(hours=1)
    )
    with pytest.raises(CancelRefused, match="only messages to token-mode endpoints"):
        await cancel_by_key(harness.bus, "w", sender="ingress")


async def test_no_user_type_may_take_the_cancel_command_s_name(backend: Backend) -> None:
    class Sneaky(Command):
        @classmethod
        def type_name(cls) -> str:
            return "bus.CancelScheduled"

    endpoint: Endpoint[NoState] = BusApp().endpoint(f"sneaky{fresh_id()[:8]}")
    with pytest.raises(ConfigurationError, match="the bus's own cancel command"):
        endpoint.handles(Sneaky)(lambda ctx, cmd: None)


async def test_a_cancel_forged_onto_a_window_mode_endpoint_s_queue_is_parked(
    backend: Backend,
) -> None:
    # Given a cancel command written straight to storage (no sender of the app sends one
    # to a window-mode endpoint: its routes refuse it)
    harness, names, handle = await started(backend, "none")
    incoming, attempt, out = fresh_id(), fresh_id(), fresh_id()
    cancel = CancelScheduled.of(handle)
    envelope = Envelope(
        id=out,
        type=cancel.type_name(),
        kind="command",
        source="ingress",
        destination=names.window,
        partition_key="k",
        correlation_id=incoming,
        causation_id=incoming,
        created_at=to_datetime(harness.config.clock()),
        body=cancel.model_dump(mode="json"),
    )
    data = envelope.to_bytes()
    name = token_name("ingress", incoming, attempt, out, data)
    await harness.raw.blob_container(harness.config.tokens_container).create(
        name, data, {"claim": ""}
    )
    signal = Signal(message_id=out, attempt_id=attempt, token=name, partition_key="k")
    await harness.raw.queue(names.window).send(signal.to_json())

    # When the window-mode endpoint receives it, it is parked at once, with the reason
    await deliver_visible(harness)
    reason = await parked_reason(harness, names.window)
    assert reason.startswith("CancelRefused| ")
    assert "only a token-mode endpoint carries out a cancel" in reason
    await still_pending(harness, names, handle)
