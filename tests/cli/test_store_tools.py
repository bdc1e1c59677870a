"""The operator's tools name each endpoint's store and read its rows there: ``bus status``
(records and what is missing), ``bus state`` and the console's overview, on an app whose
``notes`` endpoint keeps its rows in blob documents beside a table endpoint, in memory, and
on the same app with ``notes`` in Cosmos DB on the local server (the worker opens it from
``BUS_COSMOS_*`` as the tools do)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from azure.cosmos.exceptions import CosmosResourceNotFoundError
from pydantic import BaseModel

from shared.bus import BusApp, HandlerContext, Outcome
from shared.cli.commands import EXIT_OK, say_status, status_report
from shared.cli.state_command import state_command
from shared.console.overview import overview
from shared.provisioning import provision
from shared.runtime import Worker
from shared.settings import Settings
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import unique_name
from tests.test_storage_roles import PlaceOrder

NOTES, TALLY = "notes", "tally"


class Total(BaseModel):
    amount: int = 0


def notes_app() -> BusApp:
    app = BusApp()
    notes = app.endpoint(NOTES, Total, store="blob")
    tally = app.endpoint(TALLY, Total, mode="processed_messages")

    @notes.handles(PlaceOrder)
    def place(ctx: HandlerContext[Total], cmd: PlaceOrder) -> None:
        ctx.state.amount += cmd.amount

    @tally.handles(PlaceOrder)
    def count(ctx: HandlerContext[Total], cmd: PlaceOrder) -> None:
        ctx.state.amount += 1

    return app


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    opened = Worker(notes_app(), Settings({}, {}), MemoryStorageAccount())
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def cosmos_worker(cosmos: CosmosSettings) -> AsyncIterator[Worker]:
    """The app with ``notes`` in Cosmos DB: a database of its own on the local server."""
    app = notes_app()
    app.endpoints[NOTES] = replace(app.endpoints[NOTES], store="cosmos")
    assert cosmos.endpoint is not None  # the fixture sets both
    assert cosmos.key is not None
    database = unique_name("db")
    values = {
        "BUS_COSMOS_ENDPOINT": cosmos.endpoint,
        "BUS_COSMOS_KEY": cosmos.key,
        "BUS_COSMOS_DATABASE": database,
    }
    opened = Worker(app, Settings(values, {}), MemoryStorageAccount())
    try:
        yield opened
    finally:
        server = opened.cosmos()
        assert server is not None
        with contextlib.suppress(CosmosResourceNotFoundError):
            await server.client.delete_database(database)
        await opened.close()


async def processed(worker: Worker) -> None:
    """Two orders at ``notes``, one at ``tally``, delivered as the queue trigger does."""
    await provision(worker.account(), worker.resources, state=worker.state_account())
    if (server := worker.cosmos()) is not None:
        await server.provision(worker.cosmos_endpoints())
    client = worker.bus().client()
    for key in ("o1", "o2"):
        await client.send(PlaceOrder(order=key, amount=5), to=NOTES, idempotency_key=key)
    await client.send(PlaceOrder(order="t", amount=1), to=TALLY, idempotency_key="t")
    outcomes: Counter[Outcome] = Counter()
    for endpoint in (NOTES, TALLY):
        queue = worker.account().queue(endpoint)
        for signal in await queue.receive(16, visibility_timeout=30):
            outcomes[await worker.receive(endpoint, signal.content.encode(), 1)] += 1
            await queue.delete(signal.id, signal.pop_receipt)
    assert outcomes == {Outcome.PROCESSED: 3}


async def test_status_names_what_is_missing_in_each_store(worker: Worker) -> None:
    report = await status_report(worker, progress=False)

    assert "container notes-rows" in report["missing"]
    assert "table tally" in report["missing"]


async def test_status_counts_and_names_a_blob_endpoint_s_records(
    worker: Worker, capsys: pytest.CaptureFixture[str]
) -> None:
    await processed(worker)

    report = await status_report(worker, progress=False)
    say_status(report)

    assert report["missing"] == []
    notes, tally = report["endpoints"][NOTES], report["endpoints"][TALLY]
    assert (notes["store"], notes["outbox_committed"], notes["outbox_claimed"]) == ("blob", 2, 0)
    assert (tally["store"], tally["processed_rows"]) == ("table", 1)
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith(NOTES)]
    assert line.split()[:3] == [NOTES, "token", "blob"]


async def test_state_shows_a_blob_partition_s_rows(
    worker: Worker, capsys: pytest.CaptureFixture[str]
) -> None:
    await processed(worker)

    assert await state_command(worker, NOTES, "o1", as_json=False) == EXIT_OK

    shown = capsys.readouterr().out
    assert "partition 'o1' of endpoint notes (blob), mode token: 3 rows" in shown
    rows = sorted(
        line.split()[1].split("|")[0] for line in shown.splitlines() if line[:4] == "row "
    )
    assert rows == ["audit", "outbox", "state"]


async def test_the_console_overview_names_the_store_and_reads_its_audit_rows(
    worker: Worker,
) -> None:
    await processed(worker)

    seen = await overview(worker, datetime.now(UTC), scan_limit=100)

    notes = next(e for e in seen["endpoints"] if e["name"] == NOTES)
    assert notes["store"] == "blob"
    assert notes["audit_rows_scanned"] == 2
    assert sum(m["count"] for m in notes["processed_last_minutes"]) == 2


@pytest.mark.cosmos
async def test_the_tools_name_and_read_a_cosmos_endpoint(
    cosmos_worker: Worker, capsys: pytest.CaptureFixture[str]
) -> None:
    before = await status_report(cosmos_worker, progress=False)
    assert f"Cosmos DB container {NOTES}" in before["missing"]

    await processed(cosmos_worker)
    report = await status_report(cosmos_worker, progress=False)
    seen = await overview(cosmos_worker, datetime.now(UTC), scan_limit=100)
    assert await state_command(cosmos_worker, NOTES, "o1", as_json=False) == EXIT_OK

    notes = report["endpoints"][NOTES]
    assert (notes["store"], notes["outbox_committed"]) == ("cosmos", 2)
    assert report["missing"] == []
    [shown] = [e for e in seen["endpoints"] if e["name"] == NOTES]
    assert (shown["store"], shown["audit_rows_scanned"]) == ("cosmos", 2)
    assert (
        "partition 'o1' of endpoint notes (cosmos), mode token: 3 rows" in capsys.readouterr().out
    )
