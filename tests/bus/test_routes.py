"""Outputs the app cannot deliver are refused before the commit, in every endpoint mode.

A send to a misspelt endpoint or to one that does not handle the type, a subscriber the app
does not know, a partition key Table Storage refuses: each is a handler error raised before
anything is written, so nothing is committed and the host retries, then parks the incoming
message with the reason. Endpoints of other apps are allowed once declared with the types
they accept; an event published to a topic without subscribers is warned once and counted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.app import Mode
from shared.bus.envelope import Envelope
from shared.bus.routes import UndeliverableMessage
from shared.bus.unsubscribed import unsubscribed_counts
from shared.errors import InvalidName
from shared.resources import poison_queue
from tests.bus.flow import Ledger
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

BACKENDS = backend_modes(azurite=["token"])
IN_MEMORY = [p for p in BACKENDS if str(p.id).startswith("memory")]
REAL = [p for p in BACKENDS if not str(p.id).startswith("memory")]
every_backend = pytest.mark.parametrize("backend", BACKENDS, indirect=True)

REFUSED_KEYS = ["a/b", "a\\b", "a#b", "a?b", "tab\there", "\x7f", "k" * 513]
"""Partition keys Table Storage refuses. The refusal is the bus's own check, made before any
store is touched, and both store kinds refusing such keys is the table contract's test: every
key runs on the in-memory stores, one on Azurite and PostgreSQL (the same path, at two
seconds a run)."""


class Order(Command):
    partition_by = "key"
    key: str


class Charge(Command):
    partition_by = "key"
    key: str


class Ship(Command):
    partition_by = "key"
    key: str


class Noted(Event):
    """Handled by no endpoint of these apps: topic ``noted``."""

    partition_by = "key"
    key: str


Output = Callable[[HandlerContext[Ledger], Order], None]


class Names:
    def __init__(self) -> None:
        suffix = unique_name("")[:8]
        self.orders = f"orders{suffix}"
        self.payments = f"payments{suffix}"
        self.billing = f"billing{suffix}"  # an endpoint of another app
        self.ghost = f"ghost{suffix}"


@pytest.fixture
def names() -> Names:
    return Names()


def order_app(names: Names, mode: Mode, output: Output) -> BusApp:
    """``orders`` records the order and sends what ``output`` says; ``payments`` takes
    Charge only."""
    app = BusApp()
    orders = app.endpoint(names.orders, state=Ledger, mode=mode)
    payments = app.endpoint(names.payments, state=Ledger, mode=mode)

    @orders.handles(Order)
    def place(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        ctx.state.applied.append(ctx.message_id)
        output(ctx, cmd)

    @payments.handles(Charge)
    def charge(ctx: HandlerContext[Ledger], cmd: Charge) -> None:
        ctx.state.applied.append(ctx.message_id)

    return app


async def refused_without_commit(harness: Harness, names: Names) -> str:
    """Send one Order; its processing must fail before the commit on every try until the
    host parks it. Returns the reason the handler run failed with."""
    await harness.setup_bus.client().send(Order(key="k"), to=names.orders, idempotency_key="k")
    [signal] = await harness.raw.queue(names.orders).peek(1)
    with pytest.raises((UndeliverableMessage, InvalidName)) as raised:
        await harness.bus.receive(names.orders, signal.content)

    await harness.run_until_quiet()

    assert await harness.raw.queue(poison_queue(names.orders)).approximate_count() == 1
    assert await harness.applied(names.orders) == []  # no state committed
    assert await harness.audit_ids(names.orders) == []
    # The incoming token waits for a replay; no output token was ever created.
    assert [t.split("/")[0] for t in await harness.tokens()] == ["ingress"]
    assert await harness.raw.queue(names.payments).approximate_count() == 0
    return str(raised.value)


@every_backend
async def test_a_send_to_a_misspelt_endpoint_commits_nothing(
    backend: Backend, mode: Mode, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    def typo(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        ctx.send(Charge(key=cmd.key), to="ordres")

    harness = await Harness.create(backend, order_app(names, mode, typo))
    with caplog.at_level(logging.ERROR):
        reason = await refused_without_commit(harness, names)
    assert "Charge to 'ordres', which is no endpoint of this app" in reason
    assert "app.external_endpoint('ordres'" in reason
    # The host parks the message with the same reason on its last try.
    assert "which is no endpoint of this app" in caplog.text


@every_backend
async def test_a_send_of_a_type_the_endpoint_does_not_handle_commits_nothing(
    backend: Backend, mode: Mode, names: Names
) -> None:
    def wrong_type(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        ctx.send(Ship(key=cmd.key), to=names.payments)

    harness = await Harness.create(backend, order_app(names, mode, wrong_type))
    reason = await refused_without_commit(harness, names)
    assert f"Ship to {names.payments}, which does not handle it" in reason
    assert "it takes ['Charge']" in reason


@pytest.mark.parametrize("key", REFUSED_KEYS)
@pytest.mark.parametrize("verb", ["send", "publish"])
@pytest.mark.parametrize("backend", IN_MEMORY, indirect=True)
async def test_a_partition_key_table_storage_refuses_commits_nothing(
    backend: Backend, mode: Mode, names: Names, key: str, verb: str
) -> None:
    await refused_key_commits_nothing(backend, mode, names, key, verb)


@pytest.mark.parametrize("verb", ["send", "publish"])
@pytest.mark.parametrize("backend", REAL, indirect=True)
async def test_a_partition_key_table_storage_refuses_commits_nothing_on_real_stores(
    backend: Backend, mode: Mode, names: Names, verb: str
) -> None:
    await refused_key_commits_nothing(backend, mode, names, REFUSED_KEYS[0], verb)


async def refused_key_commits_nothing(
    backend: Backend, mode: Mode, names: Names, key: str, verb: str
) -> None:
    def bad_key(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        if verb == "send":
            ctx.send(Charge(key=key), to=names.payments)
        else:
            ctx.publish(Noted(key=key))

    harness = await Harness.create(backend, order_app(names, mode, bad_key))
    reason = await refused_without_commit(harness, names)
    type_name = "Charge" if verb == "send" else "Noted"
    assert reason.startswith(f"{type_name} has an unusable partition key: PartitionKey")
    assert repr(key[:40]) in reason or repr(key) in reason


@every_backend
async def test_an_external_endpoint_gets_the_types_it_accepts_and_no_other(
    backend: Backend, mode: Mode, names: Names
) -> None:
    def to_billing(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        if cmd.key == "ship":
            ctx.send(Ship(key=cmd.key), to=names.billing)
        else:
            ctx.send(Charge(key=cmd.key), to=names.billing)

    app = order_app(names, mode, to_billing)
    app.external_endpoint(names.billing, accepts=[Charge])
    harness = await Harness.create(backend, app)
    await harness.raw.queue(names.billing).create_if_missing()  # the other app provisions it
    client = harness.setup_bus.client()
    await client.send(Order(key="charge"), to=names.orders, idempotency_key="k1")
    await client.send(Order(key="ship"), to=names.orders, idempotency_key="k2")
    await harness.run_until_quiet()

    [delivered] = await harness.raw.queue(names.billing).peek()
    token = json.loads(delivered.content)["token"]
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    envelope = Envelope.from_bytes((await tokens.read(token)).data)
    assert (envelope.type, envelope.destination, envelope.body) == (
        "Charge",
        names.billing,
        {"key": "charge"},
    )
    assert len(await harness.applied(names.orders)) == 1  # the Ship order was refused
    assert await harness.raw.queue(poison_queue(names.orders)).approximate_count() == 1


@every_backend
async def test_a_subscriber_the_app_does_not_know_stops_the_publish_before_the_commit(
    backend: Backend, mode: Mode, names: Names
) -> None:
    """A recipient list is changed from outside (``bus subscribe``): a stale or misspelt
    entry would otherwise make every publish of the topic fail after its commit."""

    def publish(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        ctx.publish(Noted(key=cmd.key))

    harness = await Harness.create(backend, order_app(names, mode, publish))
    await harness.setup_bus.topics.subscribe("noted", names.ghost)
    reason = await refused_without_commit(harness, names)
    assert f"topic noted lists subscriber {names.ghost!r}, which is no endpoint" in reason
    assert f"bus unsubscribe noted {names.ghost}" in reason


@every_backend
async def test_an_external_subscriber_declared_for_the_event_gets_it(
    backend: Backend, mode: Mode, names: Names
) -> None:
    def publish(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        ctx.publish(Noted(key=cmd.key))

    app = order_app(names, mode, publish)
    app.external_endpoint(names.billing, accepts=[Noted])
    harness = await Harness.create(backend, app)
    await harness.raw.queue(names.billing).create_if_missing()
    await harness.setup_bus.topics.subscribe("noted", names.billing)
    await harness.setup_bus.client().send(Order(key="k"), to=names.orders, idempotency_key="k")
    await harness.run_until_quiet()

    assert len(await harness.applied(names.orders)) == 1
    assert await harness.raw.queue(names.billing).approximate_count() == 1


@every_backend
async def test_an_event_without_subscribers_is_warned_once_and_counted(
    backend: Backend, mode: Mode, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    def publish(ctx: HandlerContext[Ledger], cmd: Order) -> None:
        ctx.publish(Noted(key=cmd.key))

    harness = await Harness.create(backend, order_app(names, mode, publish))
    client = harness.setup_bus.client()
    with caplog.at_level(logging.WARNING, logger="shared.bus.unsubscribed"):
        for key in ("a", "b", "c"):
            await client.send(Order(key=key), to=names.orders, idempotency_key=key)
        await harness.run_until_quiet()

    assert len(await harness.applied(names.orders)) == 3  # publishing to nobody is legal
    warnings = [r for r in caplog.records if "has no subscriber" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert f"{names.orders} published Noted but topic noted" in warnings[0].getMessage()
    topics = harness.raw.blob_container(harness.config.topics_container)
    assert await unsubscribed_counts(topics) == {"noted": 3}
