"""An endpoint whose state is in PostgreSQL: declaring it, configuring its connection, and a
handler writing its own table in the bus's transaction (``ctx.sql``), exactly once."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import pytest
from pydantic import BaseModel

from shared.bus import Bus, BusApp, Command, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.bus.state.connection import ENTRA_SCOPE, Pools, PostgresSettings
from shared.config import build_config
from shared.errors import ConfigurationError
from shared.stores.instrumented import Fault, fault_at_first
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import (
    MODES,
    Harness,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend")
)
from tests.conftest import Backend, sample_settings, unique_name


class Bill(Command):
    partition_by = "order_id"
    order_id: str
    amount: int


class Billing(BaseModel):
    billed: int = 0


def billing_app(
    name: str, invoices: str, failures: list[str] | None = None, mode: Mode = "token"
) -> BusApp:
    """``billing`` keeps its state in PostgreSQL and writes one invoice row per Bill through
    the open transaction; ``failures`` makes the handler raise once per entry, after writing.

    In state-based mode a duplicate replays the handler, in a transaction that is rolled
    back, over a database that already holds the first run's row: its insert must tolerate
    that row, as a replayed handler's writes must (``docs/postgres.md``)."""
    app = BusApp()
    billing = app.endpoint(name, state=Billing, store="postgres", mode=mode)
    tolerant = " ON CONFLICT (message_id) DO NOTHING" if mode == "state_based" else ""

    @billing.handles(Bill)
    async def bill(ctx: HandlerContext[Billing], cmd: Bill) -> None:
        await ctx.sql.execute(
            f"INSERT INTO {invoices} (order_id, amount, message_id) VALUES ($1, $2, $3)" + tolerant,
            cmd.order_id,
            cmd.amount,
            ctx.message_id,
        )
        ctx.state.billed += cmd.amount
        if failures:
            raise RuntimeError(failures.pop())

    return app


@dataclass
class Billed:
    harness: Harness
    endpoint: str
    invoices: str
    url: str

    async def invoice_rows(self) -> list[tuple[str, int]]:
        connection = await asyncpg.connect(self.url)
        try:
            rows = await connection.fetch(f"SELECT order_id, amount FROM {self.invoices}")
        finally:
            await connection.close()
        return [(r["order_id"], r["amount"]) for r in rows]

    async def send(self, order: str = "o1", amount: int = 7) -> None:
        await self.harness.setup_bus.client().send(
            Bill(order_id=order, amount=amount), to=self.endpoint, idempotency_key=order
        )


@pytest.fixture
async def billed(request: pytest.FixtureRequest, backend: Backend) -> tuple[str, str, Backend]:
    url: str = request.getfixturevalue("postgres")
    invoices = unique_name("invoices_")
    connection = await asyncpg.connect(url)
    await connection.execute(
        f"CREATE TABLE {invoices} (order_id text, amount int, message_id text UNIQUE)"
    )
    await connection.close()
    return url, invoices, backend


POSTGRES = [
    pytest.param(
        ("postgres", m),
        id="postgres" if m == "token" else f"postgres-{m}",
        marks=[pytest.mark.azurite, pytest.mark.postgres],
    )
    for m in MODES
]
"""Every mode: the handler's rows join the bus's transaction whatever the mode commits."""


async def start(
    billed: tuple[str, str, Backend], mode: Mode, failures: list[str] | None = None
) -> Billed:
    url, invoices, backend = billed
    name = unique_name("billing")[:20]
    harness = await Harness.create(backend, billing_app(name, invoices, failures, mode))
    return Billed(harness, name, invoices, url)


@pytest.mark.parametrize("backend", POSTGRES, indirect=True)
async def test_a_handler_writes_its_own_table_once_per_message(
    billed: tuple[str, str, Backend], mode: Mode
) -> None:
    flow = await start(billed, mode)
    await flow.send()
    [signal] = await flow.harness.raw.queue(flow.endpoint).peek(1)
    await flow.harness.raw.queue(flow.endpoint).send(signal.content)  # a duplicate delivery

    await flow.harness.run_until_quiet()

    assert await flow.invoice_rows() == [("o1", 7)]
    assert (await flow.harness.applied_state(flow.endpoint, "o1", Billing)).billed == 7
    assert flow.harness.outcomes[Outcome.POISONED] == 0


@pytest.mark.parametrize("backend", POSTGRES, indirect=True)
@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER])
async def test_a_crash_at_the_commit_keeps_the_handlers_rows_with_the_bus_rows(
    billed: tuple[str, str, Backend], mode: Mode, fault: Fault
) -> None:
    """Crash before the commit: the invoice is rolled back with the state; the redelivery
    writes it once. Crash after it: the invoice stays, and the redelivery resumes without
    running the handler again."""
    flow = await start(billed, mode)
    await flow.send()
    flow.harness.instrumentation.plan = fault_at_first("sql.transact", fault)

    await flow.harness.run_until_quiet()

    assert flow.harness.crashes == 1
    assert await flow.invoice_rows() == [("o1", 7)]
    assert (await flow.harness.applied_state(flow.endpoint, "o1", Billing)).billed == 7


@pytest.mark.parametrize("backend", POSTGRES, indirect=True)
async def test_a_handler_that_fails_after_writing_leaves_no_row(
    billed: tuple[str, str, Backend], mode: Mode
) -> None:
    flow = await start(billed, mode, failures=["card declined"])
    await flow.send()
    [message] = await flow.harness.raw.queue(flow.endpoint).receive(1, visibility_timeout=1)

    await flow.harness.deliver(flow.endpoint, message)  # the handler raises; not acknowledged
    rows_after_failure = await flow.invoice_rows()
    await flow.harness.backend.elapse(1.5)
    await flow.harness.run_until_quiet()

    assert rows_after_failure == []
    assert await flow.invoice_rows() == [("o1", 7)]


def test_an_unknown_store_is_refused() -> None:
    app = BusApp()
    with pytest.raises(ConfigurationError, match="unknown store"):
        app.endpoint("ledger", store="mysql")  # type: ignore[arg-type]


async def test_a_postgres_endpoint_without_a_database_is_a_clear_error() -> None:
    bus = Bus(billing_app("billing", "invoices"), MemoryStorageAccount())
    with pytest.raises(ConfigurationError, match=r"BUS_POSTGRES_URL"):
        bus.receiver("billing")


def test_the_url_settings_name_a_default_and_per_endpoint_databases() -> None:
    settings = build_config(
        sample_settings(
            BUS_POSTGRES_URL="postgresql://bus@db:5432/app",
            BUS_POSTGRES_URL_BILLING_EU="postgresql://bus@eu-db:5432/billing",
            BUS_POSTGRES_POOL_SIZE="4",
            BUS_POSTGRES_ENTRA="yes",
        )
    ).postgres
    assert settings.url_for("orders") == "postgresql://bus@db:5432/app"
    assert settings.url_for("billing-eu") == "postgresql://bus@eu-db:5432/billing"
    assert settings.pool_size == 4
    assert settings.entra
    with pytest.raises(ConfigurationError, match=r"BUS_POSTGRES_URL .*libpq URL") as refused:
        build_config(sample_settings(BUS_POSTGRES_URL="Server=db;Password=secret"))
    assert "secret" not in str(refused.value)
    with pytest.raises(ConfigurationError, match=r"BUS_POSTGRES_URL_EU .*libpq URL"):
        build_config(sample_settings(BUS_POSTGRES_URL_EU="db.example:5432"))
    with pytest.raises(ConfigurationError, match=r"BUS_POSTGRES_POOL_SIZE.*from 1 to 1000"):
        build_config(sample_settings(BUS_POSTGRES_POOL_SIZE="0"))
    with pytest.raises(ConfigurationError, match=r"BUS_POSTGRES_ENTRA.*true or false"):
        build_config(sample_settings(BUS_POSTGRES_ENTRA="ture"))
    with pytest.raises(ConfigurationError, match=r"BUS_POSTGRES_URL_ORDERS"):
        PostgresSettings().url_for("orders")


class RecordingCredential:
    """Stands in for azure-identity's credential (no Entra here): hands out tokens and
    records the scopes asked for."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def get_token(self, *scopes: str) -> object:
        self.scopes += scopes

        @dataclass
        class Token:
            token: str

        return Token(f"token-{len(self.scopes)}")


@pytest.mark.postgres
async def test_entra_tokens_are_fetched_for_every_new_connection(postgres: str) -> None:
    """The local server trusts the role, so any password passes: what is checked is that each
    new pooled connection asks the credential for a token of the PostgreSQL scope."""
    credential = RecordingCredential()
    pools = Pools(PostgresSettings(url=postgres, entra=True, pool_size=2), credential)
    pool = await pools.pool(postgres)
    try:
        async with pool.acquire() as first, pool.acquire() as second:
            assert await first.fetchval("SELECT 1") == await second.fetchval("SELECT 1") == 1
    finally:
        await pools.close()

    assert credential.scopes == [ENTRA_SCOPE, ENTRA_SCOPE]
