"""Transactional sessions (``shared.bus.session``): a request's own rows and the messages it
sends commit together or not at all, on Table Storage and PostgreSQL, in memory and for real;
a retry under the same key writes and sends nothing new; a request that stops after its
commit has its messages sent by the cleanup; a stalled one is fenced."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command
from shared.bus.records import AUDIT_PREFIX
from shared.bus.session import Session
from shared.bus.session_counts import count_sessions
from shared.bus.session_records import SESSION_PREFIX, SessionRecord, session_row
from shared.bus.state.schema import migrate
from shared.bus.state.stores import PostgresDatabase
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.cli.records import count_records, describe
from shared.errors import ConfigurationError, InvalidName, InvalidValue, SessionConflict
from shared.stores.instrumented import Fault, SimulatedCrash, fault_at_first
from shared.stores.table import Entity
from tests.bus.harness import DOCUMENT_BACKENDS, SQL_BACKENDS, Harness, per_mode_backend
from tests.conftest import Backend, unique_name

__all__ = ["per_mode_backend"]

GRACE = 600.0
RESEND = 60.0


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str
    amount: int


class Taken(BaseModel):
    orders: list[str] = []


def build_app() -> BusApp:
    app = BusApp()
    app.endpoint("web", sessions=True)
    orders = app.endpoint("orders", Taken)

    @orders.handles(PlaceOrder)
    def take(ctx, message: PlaceOrder) -> None:  # type: ignore[no-untyped-def]
        ctx.state.orders.append(message.order_id)

    return app


BACKENDS = [
    pytest.param(("memory", "token"), id="memory"),
    pytest.param(("azurite", "token"), id="azurite", marks=pytest.mark.azurite),
    *SQL_BACKENDS,
    *DOCUMENT_BACKENDS,
]


pytestmark = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture
async def harness(backend: Backend) -> Harness:
    return await Harness.create(backend, build_app(), session_resend_seconds=RESEND)


def order_row(order_id: str, amount: int) -> Entity:
    return Entity(order_id, f"order-{order_id}", {"amount": amount})


async def place(harness: Harness, order_id: str, key: str | None = None) -> Session:
    async with harness.bus.session("web", partition=order_id, key=key) as s:
        if not s.deduplicated:
            s.insert(order_row(order_id, 5))
            s.send(PlaceOrder(order_id=order_id, amount=5), to="orders")
    return s


async def taken(harness: Harness, order_id: str) -> list[str]:
    return (await harness.applied_state("orders", order_id, Taken)).orders


async def user_rows(harness: Harness, order_id: str) -> dict[str, Entity]:
    rows = harness.setup_bus.endpoint_state("web").rows()
    return await rows.read(order_id, [f"order-{order_id}"])


async def cleanup(harness: Harness) -> CleanupReport:
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=CleanupSettings(grace_seconds=GRACE),
        sessions=["web"],
    )


def session_task(report: CleanupReport) -> TaskReport:
    return next(t for t in report.tasks if t.task == "sessions.web")


async def elapse(harness: Harness, seconds: float) -> None:
    if harness.backend.clock is None:
        pytest.skip("needs a manual clock")
    await harness.backend.elapse(seconds)


async def test_the_row_and_the_message_commit_together(harness: Harness) -> None:
    session = await place(harness, "o1", key="k1")
    await harness.run_until_quiet()
    assert await taken(harness, "o1") == ["o1"]
    assert "order-o1" in await user_rows(harness, "o1")
    assert len(session.message_ids) == 1
    rows = harness.setup_bus.endpoint_state("web").rows()
    found = await rows.read(
        "o1", [session_row(session.session_id), AUDIT_PREFIX + session.round_id]
    )
    record = SessionRecord.from_entity(found[session_row(session.session_id)])
    assert (record.committed, record.signalled) == (True, True)
    audit = found[AUDIT_PREFIX + session.round_id]
    assert audit["mode"] == "session"
    assert session.message_ids[0] in str(audit["caused"])


async def test_a_failing_request_writes_and_sends_nothing(harness: Harness) -> None:
    async def failing_request() -> None:
        async with harness.bus.session("web", partition="o2", key="k2") as s:
            s.insert(order_row("o2", 5))
            s.send(PlaceOrder(order_id="o2", amount=5), to="orders")
            raise RuntimeError("the request failed after its writes")

    with pytest.raises(RuntimeError):
        await failing_request()
    await harness.run_until_quiet()
    assert await taken(harness, "o2") == []
    assert await user_rows(harness, "o2") == {}
    assert await harness.tokens() == []


async def test_a_retry_under_the_same_key_writes_and_sends_nothing_new(harness: Harness) -> None:
    first = await place(harness, "o3", key="k3")
    async with harness.bus.session("web", partition="o3", key="k3") as again:
        assert again.deduplicated
        with pytest.raises(InvalidValue, match="committed before"):
            again.send(PlaceOrder(order_id="o3", amount=5), to="orders")
    assert again.message_ids == first.message_ids
    await harness.run_until_quiet()
    assert await taken(harness, "o3") == ["o3"]


async def test_a_concurrent_request_under_the_same_key_loses_and_writes_nothing(
    harness: Harness,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        slow = await stack.enter_async_context(harness.bus.session("web", partition="o4", key="k4"))
        slow.insert(Entity("o4", "second-writer", {"n": 2}))
        slow.send(PlaceOrder(order_id="o4", amount=9), to="orders")
        await place(harness, "o4", key="k4")  # the same key commits first
        with pytest.raises(SessionConflict, match="same key"):
            await stack.aclose()
    await harness.run_until_quiet()
    assert await taken(harness, "o4") == ["o4"]
    rows = harness.setup_bus.endpoint_state("web").rows()
    assert await rows.read("o4", ["second-writer"]) == {}
    assert len(await harness.tokens_in_flight()) == 0


async def test_a_request_that_stops_after_its_commit_has_its_messages_sent_by_the_cleanup(
    harness: Harness,
) -> None:
    web = harness.setup_bus.endpoint_state("web")
    before = await count_sessions(web.rows())  # a table on Azurite holds other tests' too
    harness.instrumentation.plan = fault_at_first("queue.send", Fault.CRASH_BEFORE)
    with pytest.raises(SimulatedCrash):
        await place(harness, "o5", key="k5")
    harness.instrumentation.plan = lambda op: None
    await harness.run_until_quiet()
    assert await taken(harness, "o5") == []  # committed, not yet signalled
    assert "order-o5" in await user_rows(harness, "o5")
    after = await count_sessions(web.rows())
    assert after.waiting == before.waiting + 1
    assert after.open == before.open
    counts = await count_records(harness.app.get("web"), web)
    assert f"{after.waiting} waiting to be signalled" in describe(counts)
    report = await cleanup(harness)
    assert session_task(report).kept["signalling"] == 1
    await elapse(harness, RESEND + 1)
    report = await cleanup(harness)
    assert session_task(report).changed["sessions_signalled"] == 1
    await harness.run_until_quiet()
    assert await taken(harness, "o5") == ["o5"]
    finished = (await count_sessions(web.rows())).finished
    assert finished == before.finished + 1
    again = await place(harness, "o5", key="k5")  # the retry only learns what was sent
    assert again.deduplicated
    await harness.run_until_quiet()
    assert await taken(harness, "o5") == ["o5"]


async def test_a_commit_stalled_past_the_grace_period_is_fenced(harness: Harness) -> None:
    async with contextlib.AsyncExitStack() as stack:
        stalled = await stack.enter_async_context(
            harness.bus.session("web", partition="o6", key="k6")
        )
        stalled.insert(order_row("o6", 5))
        stalled.send(PlaceOrder(order_id="o6", amount=5), to="orders")
        await elapse(harness, GRACE + 1)
        report = await cleanup(harness)
        assert session_task(report).removed["open_sessions"] == 1
        with pytest.raises(SessionConflict, match="grace period"):
            await stack.aclose()
    await harness.run_until_quiet()
    assert await taken(harness, "o6") == []
    assert await user_rows(harness, "o6") == {}
    assert await harness.tokens() == []


async def test_records_are_retired_after_the_keys_window_and_their_messages(
    harness: Harness,
) -> None:
    await place(harness, "o7", key="k7")
    await harness.run_until_quiet()
    await elapse(harness, harness.config.ingress_window_seconds + 1)
    await cleanup(harness)
    await cleanup(harness)  # the receiver's own R7 first, then the session's record
    rows = harness.setup_bus.endpoint_state("web").rows()
    assert [e async for e in rows.every(row_key_prefix=SESSION_PREFIX)] == []
    assert "order-o7" in await user_rows(harness, "o7")  # the user's rows are the user's
    # Past its window, the key names a new request: a new round, new message ids, its own
    # audit row.
    again = await place(harness, "o7-again", key="k7")
    assert not again.deduplicated
    await harness.run_until_quiet()
    assert await taken(harness, "o7-again") == ["o7-again"]


@pytest.mark.parametrize("row_key", ["state", "outbox|m", "session|x", "audit|forged", "", "a|b"])
async def test_a_session_cannot_write_the_bus_rows(harness: Harness, row_key: str) -> None:
    async with harness.bus.session("web", partition="o8") as s:
        with pytest.raises(InvalidName):
            s.insert(Entity("o8", row_key, {"claim": "x"}))
        with pytest.raises(InvalidValue, match="own partition"):
            s.insert(Entity("another", "row", {}))


async def test_only_endpoints_declared_for_sessions_take_them(harness: Harness) -> None:
    with pytest.raises(ConfigurationError, match="sessions=True"):
        harness.bus.session("orders", partition="p")


@pytest.fixture
async def own_connection(harness: Harness) -> AsyncIterator[asyncpg.Connection]:
    """The user's own connection to the database the endpoint's rows are in, and a table of
    the user's own there (not the bus's schema)."""
    database = harness.backend.sql
    if not isinstance(database, PostgresDatabase):
        pytest.skip("needs a PostgreSQL server")
    connection = await asyncpg.connect(database.settings.url)
    await connection.execute(
        "CREATE TABLE IF NOT EXISTS shop_orders (order_id text PRIMARY KEY, amount int)"
    )
    try:
        yield connection
    finally:
        await connection.close()


async def test_the_users_own_table_commits_on_the_users_own_connection(
    harness: Harness, own_connection: asyncpg.Connection
) -> None:
    order = unique_name("order")
    async with harness.bus.session("web", partition=order, connection=own_connection) as s:
        assert s.sql is own_connection
        await own_connection.execute("INSERT INTO shop_orders VALUES ($1, 7)", order)
        s.send(PlaceOrder(order_id=order, amount=7), to="orders")
    assert not own_connection.is_in_transaction()
    await harness.run_until_quiet()
    assert await taken(harness, order) == [order]
    count = "SELECT count(*) FROM shop_orders WHERE order_id = $1"
    assert await own_connection.fetchval(count, order) == 1


async def test_a_failing_request_leaves_no_row_in_the_users_table(
    harness: Harness, own_connection: asyncpg.Connection
) -> None:
    order = unique_name("order")

    async def failing_request() -> None:
        async with harness.bus.session("web", partition=order, connection=own_connection) as s:
            await own_connection.execute("INSERT INTO shop_orders VALUES ($1, 7)", order)
            s.send(PlaceOrder(order_id=order, amount=7), to="orders")
            raise RuntimeError("the request failed")

    with pytest.raises(RuntimeError):
        await failing_request()
    await harness.run_until_quiet()
    assert await taken(harness, order) == []
    count = "SELECT count(*) FROM shop_orders WHERE order_id = $1"
    assert await own_connection.fetchval(count, order) == 0


async def test_a_retried_request_writes_nothing_to_the_users_table(
    harness: Harness, own_connection: asyncpg.Connection
) -> None:
    order = unique_name("order")
    count = "SELECT count(*) FROM shop_orders WHERE order_id = $1"
    for attempt in ("first", "retry"):
        async with harness.bus.session(
            "web", partition=order, key=order, connection=own_connection
        ) as s:
            # A careless handler writes before it looks: a repeated request's write is
            # rolled back with the session.
            await own_connection.execute("INSERT INTO shop_orders VALUES ($1, 1)", order + attempt)
            if not s.deduplicated:
                await own_connection.execute("INSERT INTO shop_orders VALUES ($1, 7)", order)
                s.send(PlaceOrder(order_id=order, amount=7), to="orders")
    await harness.run_until_quiet()
    assert await taken(harness, order) == [order]
    assert await own_connection.fetchval(count, order + "first") == 1
    assert await own_connection.fetchval(count, order + "retry") == 0


async def test_a_connection_inside_a_transaction_is_refused(
    harness: Harness, own_connection: asyncpg.Connection
) -> None:
    async with own_connection.transaction():
        with pytest.raises(InvalidValue, match="not inside a transaction"):
            async with harness.bus.session("web", partition="p", connection=own_connection):
                pass


async def test_a_connection_to_another_database_is_named_as_such(
    harness: Harness, own_connection: asyncpg.Connection
) -> None:
    other = unique_name("otherdb")
    await own_connection.execute(f"CREATE DATABASE {other}")
    database = harness.backend.sql
    assert isinstance(database, PostgresDatabase)
    url = str(database.settings.url).rsplit("/", 1)[0] + f"/{other}"
    elsewhere = await asyncpg.connect(url)
    try:
        await migrate(elsewhere)  # a database with a bus schema of its own
        with pytest.raises(ConfigurationError, match="not to the database its rows are in"):
            async with harness.bus.session("web", partition="p9", connection=elsewhere) as s:
                s.send(PlaceOrder(order_id="p9", amount=1), to="orders")
    finally:
        await elsewhere.close()
    await harness.run_until_quiet()
    assert await taken(harness, "p9") == []
