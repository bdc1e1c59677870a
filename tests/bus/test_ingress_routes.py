"""Declaring endpoints of other apps, and what the HTTP ingress (and the CLI, which builds
messages the same way) says about types no endpoint takes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from shared import http_ingress
from shared.bus import Bus, BusApp, BusConfig, Command, Event, HandlerContext, Outcome
from shared.bus.app import NoState
from shared.bus.routes import UndeliverableMessage
from shared.clock import ManualClock
from shared.errors import InvalidName
from shared.provisioning import provision
from shared.resources import resources_of
from shared.stores.memory import MemoryStorageAccount
from tests.bus.flow import Ledger


class Reserve(Command):
    partition_by = "sku"
    sku: str


class Invoice(Command):
    """Taken by an endpoint of another app only."""

    partition_by = "number"
    number: str


class Orphaned(Command):
    """Declared, taken by no endpoint."""

    key: str


class Reserved(Event):
    """Handled by ``stock`` itself: published to its subscribers."""

    partition_by = "sku"
    sku: str


class Unheard(Event):
    """Declared, subscribed by no endpoint of this app or another."""

    sku: str


def test_an_external_endpoint_is_declared_once_with_the_message_types_it_takes() -> None:
    app = BusApp()
    app.endpoint("stock")
    app.external_endpoint("billing", accepts=[Invoice, Reserved])
    assert app.routes.receivers_of("Invoice") == ["billing"]
    for name, accepts in (
        ("stock", [Invoice]),  # an endpoint of this app
        ("billing", [Invoice]),  # declared already
        ("ledger", []),
        ("ledger", ["Invoice"]),  # a name, not the class
    ):
        with pytest.raises(ValueError, match=name):
            app.external_endpoint(name, accepts=accepts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="declared twice"):
        app.endpoint("billing")
    with pytest.raises(ValueError, match="invalid"):
        app.external_endpoint("Not A Queue", accepts=[Invoice])


@dataclass
class Ingress:
    bus: Bus

    async def post(self, payload: object, key: str = "k1") -> http_ingress.Answer:
        raw = json.dumps(payload).encode()
        return await http_ingress.handle(self.bus, {"Idempotency-Key": key}, raw)


@pytest.fixture
async def ingress() -> Ingress:
    app = BusApp()
    stock = app.endpoint("stock", state=Ledger)
    app.external_endpoint("billing", accepts=[Invoice])

    @stock.handles(Reserve)
    def reserve(ctx: HandlerContext[Ledger], cmd: Reserve) -> None:
        ctx.state.applied.append(ctx.message_id)

    @stock.handles(Reserved)
    def reserved(ctx: HandlerContext[Ledger], event: Reserved) -> None:
        ctx.state.applied.append(ctx.message_id)

    clock = ManualClock()
    account = MemoryStorageAccount(clock=clock)
    config = BusConfig(clock=clock)
    await provision(
        account,
        resources_of(config, ("stock", "billing")),  # billing's queue stands for the other app's
    )
    bus = Bus(app, account, config)
    await bus.subscribe_all()
    return Ingress(bus)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (
            {"type": "Unheard", "body": {"sku": "s"}},
            "Unheard is an event without subscribers (no endpoint of this app handles it and "
            "no external endpoint accepts it): it would reach nobody",
        ),
        (
            {"type": "Unheard", "to": "stock", "body": {"sku": "s"}},
            "it would reach nobody; events are published, leave out 'to'",
        ),
        (
            {"type": "Reserved", "to": "stock", "body": {"sku": "s"}},
            "Reserved is an event: it is published to its topic's subscribers, not sent to one "
            "endpoint; leave out 'to'",
        ),
        (
            {"type": "Orphaned", "to": "stock", "body": {"key": "s"}},
            "Orphaned is a command no endpoint takes",
        ),
        (
            {"type": "NoSuchType", "body": {}},
            "unknown message type 'NoSuchType'; known types: Invoice, Reserve, Reserved",
        ),
        (
            {"type": "Invoice", "to": "stock", "body": {"number": "n"}},
            "endpoint 'stock' does not handle Invoice; handled by ['billing']",
        ),
    ],
)
async def test_a_type_no_endpoint_takes_is_named_for_what_it_is(
    ingress: Ingress, payload: dict[str, object], error: str
) -> None:
    answer = await ingress.post(payload)
    assert answer.status == 400
    assert error in answer.body["error"]


async def test_a_command_for_an_external_endpoint_goes_to_its_queue(ingress: Ingress) -> None:
    answer = await ingress.post({"type": "Invoice", "body": {"number": "n1"}})  # to inferred
    assert answer.status == 202
    [signal] = await ingress.bus.account.queue("billing").peek()
    assert json.loads(signal.content)["message_id"] == answer.body["message_ids"][0]


async def test_a_stale_subscriber_is_refused_with_the_reason_before_anything_is_sent(
    ingress: Ingress,
) -> None:
    await ingress.bus.topics.subscribe("reserved", "stokc")
    answer = await ingress.post({"type": "Reserved", "body": {"sku": "s"}})
    assert answer.status == 503
    assert "topic reserved lists subscriber 'stokc', which is no endpoint" in answer.body["error"]
    assert await ingress.bus.account.queue("stock").approximate_count() == 0
    tokens = ingress.bus.account.blob_container(ingress.bus.config.tokens_container)
    assert [blob async for blob in tokens.list()] == []


async def test_a_library_client_is_checked_like_a_handler(ingress: Ingress) -> None:
    """``bus.client()`` is used without the HTTP layer: the same checks stop it before the
    ingress record or a token is written."""
    client = ingress.bus.client("batch")
    with pytest.raises(UndeliverableMessage, match="'stokc', which is no endpoint"):
        await client.send(Reserve(sku="s"), to="stokc", idempotency_key="k1")
    with pytest.raises(UndeliverableMessage, match="billing, which does not handle it"):
        await client.send(Reserve(sku="s"), to="billing", idempotency_key="k2")
    with pytest.raises(InvalidName, match="Reserve has an unusable partition key"):
        await client.send(Reserve(sku="a#b"), to="stock", idempotency_key="k3")

    bus = ingress.bus
    tokens = bus.account.blob_container(bus.config.tokens_container)
    assert [blob async for blob in tokens.list()] == []
    assert [row async for row in bus.account.table(bus.config.ingress_table).query_all()] == []


def test_a_subscription_is_checked_against_the_app_before_the_list_changes() -> None:
    app = BusApp()
    stock = app.endpoint("stock", state=NoState)
    stock.handles(Reserved)(lambda ctx, event: None)
    app.external_endpoint("billing", accepts=[Invoice, Unheard])
    app.routes.check_subscription("reserved", "stock")
    app.routes.check_subscription("unheard", "billing")
    with pytest.raises(ValueError, match="'stokc' is no endpoint of this app"):
        app.routes.check_subscription("reserved", "stokc")
    with pytest.raises(ValueError, match=r"billing takes no event of topic reserved; .*unheard"):
        app.routes.check_subscription("reserved", "billing")


# Delayed messages through the HTTP ingress: ``delay_seconds`` or ``deliver_at`` in the body
# hide the message until its time; anything else in those fields is a 400, nothing sent.

RESERVE = {"type": "Reserve", "to": "stock", "body": {"sku": "s1"}}


async def deliver_visible(ingress: Ingress) -> list[Outcome]:
    queue = ingress.bus.account.queue("stock")
    outcomes = []
    while messages := await queue.receive(32, visibility_timeout=30):
        for message in messages:
            outcomes.append(await ingress.bus.receive("stock", message.content, 1))
            await queue.delete(message.id, message.pop_receipt)
    return outcomes


def bus_now(ingress: Ingress) -> datetime:
    return datetime.fromtimestamp(ingress.bus.config.clock(), UTC)


@pytest.mark.parametrize("when", ["delay_seconds", "deliver_at"])
async def test_a_delayed_request_is_processed_once_and_not_before_its_time(
    ingress: Ingress, when: str
) -> None:
    due: dict[str, object] = {"delay_seconds": 120}
    if when == "deliver_at":
        due = {"deliver_at": (bus_now(ingress) + timedelta(seconds=120)).isoformat()}

    first = await ingress.post({**RESERVE, **due}, key="late-1")
    again = await ingress.post({**RESERVE, **due}, key="late-1")

    assert (first.status, again.status) == (202, 200)
    assert await deliver_visible(ingress) == []  # hidden, the repeat's signal too
    clock = ingress.bus.config.clock
    clock.advance(121)  # type: ignore[attr-defined]
    outcomes = await deliver_visible(ingress)
    # The repeat signalled the same token again (at least once). Its copy comes after the
    # message was processed but before the cleanup's R7, so it finds the token claimed by the
    # committed O(m) and resumes: nothing is applied again, nothing sent.
    assert sorted(o.value for o in outcomes) == ["processed", "resumed"]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"delay_seconds": "600"}, "'delay_seconds' must be a number of seconds"),
        ({"delay_seconds": True}, "'delay_seconds' must be a number of seconds"),
        ({"delay_seconds": -1}, "'delay_seconds' must not be negative"),
        ({"delay_seconds": 1e300}, "too large"),
        ({"delay_seconds": 400 * 86400 * 10}, "between 0 and 3650 days"),
        ({"deliver_at": 1700000000}, "'deliver_at' must be an ISO 8601 time"),
        ({"deliver_at": "next tuesday"}, "'deliver_at' is not an ISO 8601 time"),
        ({"deliver_at": "2030-01-01T00:00:00"}, "needs a time zone"),
        ({"deliver_at": "2999-01-01T00:00:00+00:00"}, "at most 3650 days away"),
        (
            {"delay_seconds": 5, "deliver_at": "2030-01-01T00:00:00+00:00"},
            "a delay or a deliver_at time, not both",
        ),
        ({"delay": 5}, "unexpected fields ['delay']"),
    ],
)
async def test_a_bad_due_time_is_a_400_and_sends_nothing(
    ingress: Ingress, fields: dict[str, object], error: str
) -> None:
    answer = await ingress.post({**RESERVE, **fields})

    assert answer.status == 400
    assert error in answer.body["error"]
    assert await ingress.bus.account.queue("stock").peek(32) == []
    # The key was not used up: the same key with a good request is accepted.
    assert (await ingress.post(RESERVE)).status == 202
