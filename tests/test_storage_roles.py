"""Two storage roles on real emulators: the messaging account (queues, tokens, payloads,
topics, parked messages, ingress records, the app-wide tables) and the app's state account
(each endpoint's table), named by ``BUS_STATE_STORAGE_SETTING``.

The messaging account is the session's emulator, as for two apps of one system; each state
account is an emulator of its own, and the one that goes down is frozen (SIGSTOP), so that it
stops answering without closing its connections."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pydantic import BaseModel

from lab.local.azurite import AzuriteEndpoints
from shared.bus import BusApp, HandlerContext, Outcome
from shared.bus.messages import Command
from shared.bus.records import AUDIT_PREFIX
from shared.config import build_config
from shared.errors import NotFound, OutcomeUnknown, StorageError
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.settings import StorageSettings, resolve_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import InstrumentedAccount
from tests.conftest import started_azurite, unique_name
from tests.frozen_azurite import FreezableAzurite, started_freezable

pytestmark = pytest.mark.azurite

REPO = Path(__file__).resolve().parents[1]
STATE_SETTING = "StateStorage"
SHORT_TIMEOUTS = {
    "BUS_STORAGE_CONNECT_TIMEOUT": "1",
    "BUS_STORAGE_READ_TIMEOUT": "1",
    "BUS_STORAGE_CALL_TIMEOUT": "3",
    "BUS_INGRESS_TIMEOUT": "6",
}
"""A call to a frozen account gives up after 3 s rather than the default 8."""
HOST_TRIES = 2
"""The test host.json's maxDequeueCount (``few_tries``; the repository's is 5): the delivery on
which the host would give a failing message up. Each delivery to an app whose state store is
down waits for a call to time out and for the message to come back, so the fewer tries the
deliveries must outlast, the shorter the test; two are enough to show none is spent."""
DOWN_DELIVERIES = HOST_TRIES + 2
"""Deliveries of a message while its state account is down: more than the host's tries, so
a message that spent one try on each would have been parked."""
SHORT_WAITS = {"BUS_STATE_WAIT_MAX_SECONDS": "1"}
"""A message waiting for the state store comes back after 1 s rather than 5 s and more."""


class PlaceOrder(Command):
    partition_by = "order"
    order: str
    amount: int


class Bill(Command):
    partition_by = "order"
    order: str
    amount: int


class Order(BaseModel):
    amount: int = 0


class Ledger(BaseModel):
    billed: int = 0


def shop(orders: str, billing: str) -> BusApp:
    """An order endpoint (token mode) that bills a second one (state-based mode): the two
    kinds of endpoint rows."""
    app = BusApp()
    taking = app.endpoint(orders, Order)
    charging = app.endpoint(billing, Ledger, mode="state_based")

    @taking.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        ctx.state.amount = cmd.amount
        ctx.send(Bill(order=cmd.order, amount=cmd.amount), to=billing)

    @charging.handles(Bill)
    def bill(ctx: HandlerContext[Ledger], cmd: Bill) -> None:
        ctx.state.billed += cmd.amount

    return app


def shop_names() -> tuple[str, str]:
    return unique_name("orders"), unique_name("billing")


def settings_for(messaging: str, state: str | None, **values: str) -> dict[str, str]:
    found = {"AzureWebJobsStorage": messaging, **values}
    if state is not None:
        found |= {"BUS_STATE_STORAGE_SETTING": STATE_SETTING, STATE_SETTING: state}
    return found


def worker(
    app: BusApp,
    values: dict[str, str],
    *,
    account: StorageAccount | None = None,
    state_account: StorageAccount | None = None,
    root: Path = REPO,
) -> Worker:
    """A worker of ``app`` on ``values``, host.json from ``root``."""
    config = build_config(resolve_settings(environ=values, local_file=None), root=root)
    return Worker(app, config, account, state_account=state_account)


@pytest.fixture(scope="module")
def few_tries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose host.json is the repository's with ``HOST_TRIES`` as maxDequeueCount."""
    host = json.loads((REPO / "host.json").read_text())
    host["extensions"]["queues"]["maxDequeueCount"] = HOST_TRIES
    folder = tmp_path_factory.mktemp("few-tries")
    (folder / "host.json").write_text(json.dumps(host))
    return folder


@pytest.fixture(scope="module")
def state_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # a second account: an emulator of its own


@pytest.fixture(scope="module")
def frozen_state() -> Iterator[FreezableAzurite]:
    yield from started_freezable()


async def table_exists(account: StorageAccount, table: str) -> bool:
    try:
        await account.table(table).query(page_size=1)
    except NotFound:
        return False
    return True


async def queue_exists(account: StorageAccount, queue: str) -> bool:
    try:
        await account.queue(queue).approximate_count()
    except NotFound:
        return False
    return True


async def drain(built: Worker, endpoints: tuple[str, ...]) -> list[Outcome]:
    """Deliver the endpoints' messages as the queue trigger does until their queues are
    empty; every one must be processed."""
    outcomes: list[Outcome] = []
    account = built.account()
    for _ in range(20):
        busy = False
        for endpoint in endpoints:
            for signal in await account.queue(endpoint).receive(16, visibility_timeout=30):
                busy = True
                outcome = await built.receive(
                    endpoint, signal.content.encode(), signal.dequeue_count
                )
                assert outcome is Outcome.PROCESSED, (endpoint, outcome)
                outcomes.append(outcome)
                await account.queue(endpoint).delete(signal.id, signal.pop_receipt)
        if not busy:
            return outcomes
    raise AssertionError("the queues did not drain")


async def state_row(account: StorageAccount, endpoint: str, partition: str) -> dict[str, object]:
    entity = await account.table(endpoint).get(partition, "state")
    return json.loads(str(entity.properties["data"]))  # type: ignore[no-any-return]


def counted(endpoints: AzuriteEndpoints | FreezableAzurite) -> InstrumentedAccount:
    return InstrumentedAccount(
        AzureStorageAccount(StorageSettings(connection_string=endpoints.connection_string))
    )


def touched(account: InstrumentedAccount, since: int = 0) -> set[tuple[str, str]]:
    """(kind of store, name) of every request the account was sent from operation
    ``since`` on."""
    return {
        (op.kind.split(".")[0], op.target.split("/")[0])
        for op in account.instrumentation.operations[since:]
    }


# --- (a) A state account of its own ---------------------------------------------------------


async def test_a_state_account_of_its_own_holds_every_endpoint_row_and_only_those(
    azurite: AzuriteEndpoints, state_azurite: AzuriteEndpoints
) -> None:
    names = shop_names()
    messaging, state = counted(azurite), counted(state_azurite)
    values = settings_for(
        azurite.connection_string, state_azurite.connection_string, CLEANUP_BUDGET_SECONDS="0"
    )
    built = worker(shop(*names), values, account=messaging, state_account=state)
    try:
        assert built.state_account() is state
        assert built.account() is messaging
        await provision(messaging, built.resources, state=state)
        for name in names:
            assert await table_exists(state, name), f"table {name} not in the state account"
            assert not await table_exists(messaging, name), f"table {name} in messaging"
            assert await queue_exists(messaging, name)
            assert await queue_exists(messaging, poison_queue(name))
            assert not await queue_exists(state, name)
        with pytest.raises(NotFound):  # no container of messaging's in the state account
            await state.blob_container(built.config.tokens_container).get_properties("any")
        # The bus's requests from here on.
        mark, sent = state.instrumentation.count, messaging.instrumentation.count

        await (
            built.bus()
            .client()
            .send(
                PlaceOrder(order="o1", amount=700), to=names[0], idempotency_key=unique_name("key")
            )
        )
        assert await drain(built, names) == [Outcome.PROCESSED] * 2

        assert await state_row(state, names[0], "o1") == {"amount": 700}
        assert await state_row(state, names[1], "o1") == {"billed": 700}
        audits = [e async for e in state.table(names[0]).query_all(row_key_prefix=AUDIT_PREFIX)]
        assert len(audits) == 1, "the audit row is in the state account"
        # Every request of the state account was to an endpoint's table; the messaging
        # account was sent none to an endpoint's table and every other request.
        assert {kind for kind, _ in touched(state, mark)} == {"table"}
        assert {name for _, name in touched(state, mark)} <= set(names)
        assert not {("table", name) for name in names} & touched(messaging, sent)
        assert {
            ("blob", built.config.tokens_container),
            ("table", built.config.ingress_table),
            ("queue", names[0]),
            ("queue", names[1]),
        } <= touched(messaging)

        # The cleanup (each task one page: a zero budget) reads the endpoints' rows in the
        # state account too, and its checkpoints in the messaging account.
        before = state.instrumentation.count
        await built.cleanup(grace_seconds=0)
        assert state.instrumentation.operations[before:], "the cleanup read no endpoint row"
        assert {name for _, name in touched(state, mark)} <= set(names)
        assert not {("table", name) for name in names} & touched(messaging, sent)
        assert ("table", built.app_config.cleanup.checkpoint_table) in touched(messaging)
    finally:
        await built.close()
        await messaging.close()
        await state.close()


# --- (b) No state setting: one account, as before -------------------------------------------


async def test_without_a_state_setting_the_one_account_holds_everything(
    azurite: AzuriteEndpoints,
) -> None:
    names = shop_names()
    account = counted(azurite)
    built = worker(shop(*names), settings_for(azurite.connection_string, None), account=account)
    try:
        assert built.state_account() is built.account() is account
        assert built.bus().state is built.bus().account
        await provision(account, built.resources)
        for name in names:
            assert await table_exists(account, name)
        await (
            built.bus()
            .client()
            .send(
                PlaceOrder(order="o1", amount=30), to=names[0], idempotency_key=unique_name("key")
            )
        )
        assert await drain(built, names) == [Outcome.PROCESSED] * 2
        assert await state_row(account, names[1], "o1") == {"billed": 30}
        assert {("table", names[0]), ("table", names[1])} <= touched(account)
    finally:
        await built.close()
        await account.close()


async def test_naming_the_messaging_connection_as_the_state_one_keeps_one_account() -> None:
    values = settings_for("UseDevelopmentStorage=true", None)
    values["BUS_STATE_STORAGE_SETTING"] = "AzureWebJobsStorage"
    built = worker(shop(*shop_names()), values)
    assert not built.separate_state
    assert built.state_account() is built.account()
    await built.close()


# --- (c) One app's state account down --------------------------------------------------------


async def deliver_once(built: Worker, endpoint: str) -> tuple[int, Outcome | BaseException]:
    """One delivery of the endpoint's message, as the queue trigger makes it, waiting (by
    count, not by clock) for it to be visible again: its dequeue count, and the outcome of
    its receive or the error raised to the host. A message whose receive raises is left in
    its queue, as the host leaves it; otherwise it is acknowledged."""
    queue = built.account().queue(endpoint)
    for _ in range(200):
        [*signals] = await queue.receive(1, visibility_timeout=1)
        if signals:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"no message came back to {endpoint}")
    [signal] = signals
    try:
        outcome = await built.receive(endpoint, signal.content.encode(), signal.dequeue_count)
    except (OutcomeUnknown, StorageError) as e:
        return signal.dequeue_count, e
    await queue.delete(signal.id, signal.pop_receipt)
    return signal.dequeue_count, outcome


async def test_an_app_whose_state_account_is_down_waits_while_the_other_app_works(
    azurite: AzuriteEndpoints,
    state_azurite: AzuriteEndpoints,
    frozen_state: FreezableAzurite,
    few_tries: Path,
) -> None:
    down_names, up_names = shop_names(), shop_names()
    down = worker(
        shop(*down_names),
        settings_for(
            azurite.connection_string,
            frozen_state.connection_string,
            **SHORT_TIMEOUTS,
            **SHORT_WAITS,
        ),
        root=few_tries,
    )
    up = worker(
        shop(*up_names), settings_for(azurite.connection_string, state_azurite.connection_string)
    )
    try:
        for built in (down, up):
            await provision(built.account(), built.resources, state=built.state_account())
        with frozen_state.frozen():
            # Sending needs only the messaging account: the down app still takes messages.
            for built, to in ((down, down_names[0]), (up, up_names[0])):
                client = built.bus().client()
                await client.send(
                    PlaceOrder(order="o1", amount=40), to=to, idempotency_key=unique_name("key")
                )
            assert down.config.max_dequeue_count == HOST_TRIES
            # Each delivery finds the state store silent and gives the message back to wait:
            # a new queue message, first try again, so no try is spent however long it lasts.
            waits = [await deliver_once(down, down_names[0]) for _ in range(DOWN_DELIVERIES)]
            assert waits == [(1, Outcome.POSTPONED)] * DOWN_DELIVERIES, waits

            assert await drain(up, up_names) == [Outcome.PROCESSED] * 2
            assert await state_row(up.state_account(), up_names[1], "o1") == {"billed": 40}

            status, body = await down.health()
            assert status == 503
            errors = json.loads(body)["errors"]
            assert errors
            assert all("in the state account" in error for error in errors), errors
            queues = down.account()
            assert await queues.queue(poison_queue(down_names[0])).approximate_count() == 0
            assert await queues.queue(down_names[0]).approximate_count() == 1, "it waits"

        assert await deliver_once(down, down_names[0]) == (1, Outcome.PROCESSED), "once back"
        assert await drain(down, down_names) == [Outcome.PROCESSED], "and billed"
        assert await state_row(down.state_account(), down_names[0], "o1") == {"amount": 40}
        assert await state_row(down.state_account(), down_names[1], "o1") == {"billed": 40}
        for name in (*down_names, *up_names):
            assert await down.account().queue(poison_queue(name)).approximate_count() == 0
    finally:
        await down.close()
        await up.close()


def closed_port_url(url: str) -> str:
    """``url`` with its port replaced by one nothing listens on: a database that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{port}")).geturl()


def ledger_app(endpoint: str) -> BusApp:
    app = BusApp()

    @app.endpoint(endpoint, Ledger, store="postgres").handles(Bill)
    def bill(ctx: HandlerContext[Ledger], cmd: Bill) -> None:
        ctx.state.billed += cmd.amount

    return app


async def test_an_app_whose_database_is_down_waits_for_it_too(
    azurite: AzuriteEndpoints, postgres: str, few_tries: Path
) -> None:
    # PostgreSQL is the app's state store as its state account is: a refused connection
    # gives the message back to wait, past the host's tries, never parked.
    name = unique_name("ledger")
    down_url = closed_port_url(postgres)
    assert down_url != postgres
    down = worker(
        ledger_app(name),
        settings_for(azurite.connection_string, None, BUS_POSTGRES_URL=down_url, **SHORT_WAITS),
        root=few_tries,
    )
    up = worker(
        ledger_app(name), settings_for(azurite.connection_string, None, BUS_POSTGRES_URL=postgres)
    )
    try:
        await provision(down.account(), down.resources)
        assert down.config.max_dequeue_count == HOST_TRIES
        client = down.bus().client()
        await client.send(Bill(order="o1", amount=9), to=name, idempotency_key=unique_name("key"))
        waits = [await deliver_once(down, name) for _ in range(DOWN_DELIVERIES)]
        assert waits == [(1, Outcome.POSTPONED)] * DOWN_DELIVERIES, waits
        assert await down.account().queue(poison_queue(name)).approximate_count() == 0

        # The same app on a database that answers: the message was kept, and is processed.
        assert await deliver_once(up, name) == (1, Outcome.PROCESSED)
        states = [row async for row in up.bus().endpoint_state(name).states()]
        assert [(row.partition_key, json.loads(row.data)) for row in states] == [
            ("o1", {"billed": 9})
        ]
    finally:
        await down.close()
        await up.close()
