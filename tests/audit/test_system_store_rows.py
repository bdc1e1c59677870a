"""The system audit reads an app's endpoints whose audit rows are off tables where the app
keeps them (here blob documents on Azurite), through the app's own stores: the driver's
rows for ``run --system`` (``shared.audit.system_source``), without Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from shared.audit.rows import AUDIT_COLUMNS
from shared.audit.system_source import app_source, store_rows
from shared.bus import BusApp, HandlerContext, Outcome
from shared.cli.opened import opened_worker
from shared.provisioning import provision
from shared.system import load_system
from tests.audit.test_system_audit import drain
from tests.conftest import unique_name
from tests.test_storage_roles import PlaceOrder

pytestmark = pytest.mark.azurite

DESK = f"desk{unique_name('')[:8]}"
LEDGER = f"ledger{unique_name('')[:8]}"


class Total(BaseModel):
    amount: int = 0


def notes_app() -> BusApp:
    """``DESK`` keeps its rows in blob documents, ``LEDGER`` in its table."""
    app = BusApp()
    desk = app.endpoint(DESK, Total, store="blob")
    ledger = app.endpoint(LEDGER, Total)

    @desk.handles(PlaceOrder)
    def place(ctx: HandlerContext[Total], cmd: PlaceOrder) -> None:
        ctx.state.amount += cmd.amount

    @ledger.handles(PlaceOrder)
    def note(ctx: HandlerContext[Total], cmd: PlaceOrder) -> None:
        ctx.state.amount += cmd.amount

    return app


notes = notes_app()


def system_file(folder: Path, connection: str) -> Path:
    path = folder / "system.json"
    app = {
        "name": "notes",
        "busApp": f"{__name__}:notes",
        "store": "table",
        "settings": {"AzureWebJobsStorage": connection},
    }
    path.write_text(json.dumps({"apps": [app]}))
    return path


async def test_the_driver_reads_blob_document_rows_where_the_app_keeps_them(
    azurite: Any, tmp_path: Path
) -> None:
    path = system_file(tmp_path, azurite.connection_string)
    [loaded] = load_system(path, environ={}).load()
    async with opened_worker(loaded.app, loaded.config, require_resources=False) as worker:
        await provision(worker.account(), worker.resources, state=worker.state_account())
        client = worker.bus().client()
        receipts = [
            await client.send(PlaceOrder(order=f"o{i}", amount=1), to=DESK, idempotency_key=f"d{i}")
            for i in range(3)
        ]
        await client.send(PlaceOrder(order="t", amount=1), to=LEDGER, idempotency_key="t")
        assert await drain(worker, DESK) == {Outcome.PROCESSED: 3}
        assert await drain(worker, LEDGER) == {Outcome.PROCESSED: 1}

    source = app_source(loaded)
    rows = [dict(zip(AUDIT_COLUMNS, row, strict=True)) for row in await store_rows(source)]

    assert source.elsewhere == {DESK: "blob"}
    assert source.state_tables == [LEDGER]
    assert f"['{DESK}'] in blob documents" in source.describe()
    assert sorted(str(r["message_id"]) for r in rows) == sorted(r.message_ids[0] for r in receipts)
    assert {r["table"] for r in rows} == {DESK}
