"""A handler's effect requests: their keys and what a request refuses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.bus.app import NoState
from shared.bus.context import HandlerContext
from shared.bus.effects import (
    PERFORMER_ENDPOINT,
    EffectAnswered,
    EffectRequest,
    ServiceDeclaration,
)
from shared.bus.envelope import Envelope
from shared.bus.messages import Command
from shared.errors import InvalidName, UndeclaredService


class ChargeAnswered(EffectAnswered):
    pass


class NotAnAnswer(Command):
    key: str


SERVICES = {"payments": ServiceDeclaration("payments", {"charge": "/v1/charges"})}


def context(message_id: str) -> HandlerContext[NoState]:
    envelope = Envelope(
        id=message_id,
        type="PlaceOrder",
        kind="command",
        source="client",
        destination="orders",
        partition_key="order-1",
        correlation_id=message_id,
        causation_id=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        body={},
    )
    return HandlerContext(
        endpoint="orders",
        envelope=envelope,
        state=NoState(),
        now=envelope.created_at,
        max_payload_bytes=64 * 1024,
        max_outputs=10,
        services=SERVICES,
    )


def charge(ctx: HandlerContext[NoState], amount: int) -> str:
    return ctx.request_effect(
        service="payments", operation="charge", body={"amount": amount}, answer=ChargeAnswered
    )


def test_keys_are_the_same_on_every_run_and_differ_by_position_and_message() -> None:
    first_run, second_run, other = context("m-1"), context("m-1"), context("m-2")
    keys = [charge(first_run, 10), charge(first_run, 20)]
    assert [charge(second_run, 10), charge(second_run, 20)] == keys
    assert keys[0] != keys[1]
    assert charge(other, 10) not in keys


def test_a_request_is_a_pending_command_to_the_performer_for_this_partition() -> None:
    ctx = context("m-1")
    key = charge(ctx, 10)
    [output] = ctx.outputs
    assert output.to == PERFORMER_ENDPOINT
    assert output.message == EffectRequest(
        key=key,
        service="payments",
        operation="charge",
        body={"amount": 10},
        answer_type="ChargeAnswered",
        reply_to="orders",
        partition="order-1",
    )


@pytest.mark.parametrize(
    "service", ["https://evil.example/charge", "payments\nforged line", "", "Payments"]
)
def test_a_service_is_a_declared_name_never_an_address(service: str) -> None:
    ctx = context("m-1")
    with pytest.raises(InvalidName):
        ctx.request_effect(service=service, operation="charge", body={}, answer=ChargeAnswered)
    assert ctx.outputs == []


def test_the_answer_type_must_be_an_effect_answer() -> None:
    with pytest.raises(TypeError):
        context("m-1").request_effect(
            service="payments",
            operation="charge",
            body={},
            answer=NotAnAnswer,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(("service", "operation"), [("refunds", "charge"), ("payments", "refund")])
def test_an_undeclared_service_or_operation_is_refused_when_requested(
    service: str, operation: str
) -> None:
    ctx = context("m-1")
    with pytest.raises(UndeclaredService):
        ctx.request_effect(service=service, operation=operation, body={}, answer=ChargeAnswered)
    assert ctx.outputs == []
    assert charge(ctx, 10) == charge(context("m-1"), 10), "a refusal uses up no position"
