"""The promise that sets the token mode apart: residue bounded by messages in flight.

The same workload (1,000 messages by default, 10,000 under `-m slow`), with faults injected at
random storage operations, runs
through token-mode endpoints and through processed-messages-table endpoints. After the queues
drain and one cleanup run, the token mode keeps no deduplication data at all, while the
processed-messages table keeps one row per message (until its retention window passes).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.app import Mode
from shared.bus.records import OUTBOX_PREFIX
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.clock import ManualClock
from shared.stores.instrumented import Fault, Operation
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend

WALLETS = 500
FAULT_RATE = 0.004


class Deposit(Command):
    partition_by = "wallet"
    wallet: str
    amount: int


class Receipt(Command):
    partition_by = "wallet"
    wallet: str
    amount: int


class Balance(BaseModel):
    total: int = 0
    applied: int = 0


def wallet_app(mode: Mode) -> BusApp:
    app = BusApp()
    wallets = app.endpoint("wallets", state=Balance, mode=mode)
    receipts = app.endpoint("receipts", state=Balance, mode=mode)

    @wallets.handles(Deposit)
    def deposit(ctx: HandlerContext[Balance], cmd: Deposit) -> None:
        ctx.state.total += cmd.amount
        ctx.state.applied += 1
        ctx.send(Receipt(wallet=cmd.wallet, amount=cmd.amount), to="receipts")

    @receipts.handles(Receipt)
    def receipt(ctx: HandlerContext[Balance], cmd: Receipt) -> None:
        ctx.state.total += cmd.amount
        ctx.state.applied += 1

    return app


def random_faults(seed: int, rate: float):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    kinds = [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.ERROR_BEFORE, Fault.ERROR_AFTER]

    def plan(operation: Operation) -> Fault | None:
        return rng.choice(kinds) if rng.random() < rate else None

    return plan


async def run_workload(mode: Mode, deposits: int) -> tuple[Harness, int, float]:
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    harness = await Harness.create(backend, wallet_app(mode))
    client = harness.setup_bus.client()
    for i in range(deposits):
        wallet = f"w{i % WALLETS}"
        await client.send(Deposit(wallet=wallet, amount=1), to="wallets", idempotency_key=f"d{i}")
    harness.instrumentation.plan = random_faults(seed=7, rate=FAULT_RATE)
    started = time.perf_counter()
    await harness.run_until_quiet(max_passes=10_000)
    return harness, len(harness.instrumentation.injected), time.perf_counter() - started


async def totals(harness: Harness, endpoint: str) -> tuple[int, int]:
    total = applied = 0
    async for entity in harness.raw.table(endpoint).query_all(row_key_prefix="state"):
        state = Balance.model_validate_json(str(entity["data"]))
        total, applied = total + state.total, applied + state.applied
    return total, applied


async def count_rows(harness: Harness, prefix: str) -> int:
    return sum(
        [
            len([e async for e in harness.raw.table(endpoint).query_all(row_key_prefix=prefix)])
            for endpoint in harness.app.endpoints
        ]
    )


async def one_cleanup_run(harness: Harness, later: float = 3600) -> CleanupReport:
    clock = harness.config.clock
    report = await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: clock() + later),
        settings=CleanupSettings(budget_seconds=600, page_size=1000),
    )
    assert report.complete
    return report


@pytest.mark.parametrize("mode", ["token", "processed_messages"])
@pytest.mark.parametrize(
    "deposits",
    [
        pytest.param(500, id="1000-messages"),
        pytest.param(5_000, id="10000-messages", marks=pytest.mark.slow),
    ],
)
async def test_messages_with_faults_leave_residue_only_where_rows_are_kept(
    mode: Mode, deposits: int, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, faults, seconds = await run_workload(mode, deposits)
    assert faults > deposits // 100  # the run really was disturbed
    assert harness.crashes > 0
    # Exactly once, despite the faults: every deposit applied once at each endpoint.
    for endpoint in ("wallets", "receipts"):
        assert await totals(harness, endpoint) == (deposits, deposits)

    await one_cleanup_run(harness)

    tokens = len(await harness.tokens())
    outbox_records = await count_rows(harness, OUTBOX_PREFIX)
    processed_rows = await count_rows(harness, "processed|")
    with capsys.disabled():
        print(
            f"\nresidue after {2 * deposits} messages, {faults} faults, one cleanup run "
            f"[{mode}]: tokens={tokens} outbox_records={outbox_records} "
            f"processed_rows={processed_rows} ({seconds:.1f}s)"
        )
    assert tokens == 0
    if mode == "token":
        assert (outbox_records, processed_rows) == (0, 0)
    else:
        assert (outbox_records, processed_rows) == (0, 2 * deposits)
        # Its only bound is the retention window: a run after it removes the rows.
        week = harness.config.processed_retention_seconds
        report = await one_cleanup_run(harness, later=week + 3600)
        assert report.removed()["processed_rows"] == 2 * deposits
        assert await count_rows(harness, "processed|") == 0
