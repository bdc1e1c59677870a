"""The export reads the audit rows of endpoints that keep them off tables (PostgreSQL and its
in-memory model, Cosmos DB's model and the local server, blob documents in memory and on
Azurite) into the same
Parquet layout as table rows, resumably; the command line opens those stores as the app
does, and a direct run, which reads tables only, refuses an app with such endpoints."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from shared.audit.cli import EXIT_OK, EXIT_USAGE, main
from shared.audit.export import export
from shared.audit.store_rows import endpoint_states
from shared.bus import BusApp
from shared.bus.app import Mode, Store
from shared.errors import ConfigurationError
from shared.settings import Settings
from shared.stores.cosmos.database import CosmosDatabase
from shared.stores.cosmos.settings import CosmosSettings
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import (  # noqa: F401  (fixtures "backend" and "mode")
    DOCUMENT_BACKENDS,
    DOCUMENT_WINDOW_BACKENDS,
    SQL_BACKENDS,
    SQL_WINDOW_BACKENDS,
    Harness,
    endpoint_mode,
    per_mode_backend,
)
from tests.conftest import Backend, unique_name

OFF_TABLES = SQL_BACKENDS + SQL_WINDOW_BACKENDS + DOCUMENT_BACKENDS + DOCUMENT_WINDOW_BACKENDS


def rows_in(folder: Path) -> list[dict[str, Any]]:
    return list(ds.dataset(str(folder), format="parquet").to_table().to_pylist())


@pytest.mark.parametrize("backend", OFF_TABLES, indirect=True)
async def test_audit_rows_off_tables_export_to_the_table_layout(
    backend: Backend, mode: Mode, tmp_path: Path
) -> None:
    harness, names = await run_orders(backend, mode)
    sql = {name: harness.rows(name) for name in names.all}
    ingress = [harness.config.ingress_table]
    out = tmp_path / "export"

    first = await export(
        harness.raw,
        out,
        endpoint_tables=names.all,
        ingress_tables=ingress,
        page_size=2,
        max_pages=3,
        sql=sql,
    )
    final = await export(
        harness.raw, out, endpoint_tables=names.all, ingress_tables=ingress, page_size=2, sql=sql
    )

    assert (first.complete, final.complete) == (False, True)
    audit = rows_in(out / "audit")
    assert len(audit) == ORDERS * DELIVERIES_PER_ORDER
    assert len({(r["table"], r["partition_key"], r["message_id"]) for r in audit}) == len(audit)
    for endpoint in names.all:
        exported = sorted(r["message_id"] for r in audit if r["table"] == endpoint)
        assert exported == sorted(await harness.audit_ids(endpoint))
        assert exported == sorted(await harness.applied(endpoint))
    placed = [r for r in audit if r["table"] == names.orders]
    assert {r["mode"] for r in placed} == {mode}, [r["mode"] for r in placed]
    assert all(r["processed_at"] is not None for r in placed)
    # caused is the typed list of deliveries (array<struct> in Spark), read off tables too
    assert all(r["caused"] and all(c["destination"] for c in r["caused"]) for r in placed)


billing_app = BusApp()
billing_app.endpoint("billing", store="postgres")
billing_app.endpoint("ledger", store="cosmos")
billing_app.endpoint("notes", store="blob")
billing_app.endpoint("orders")


def test_a_direct_run_refuses_an_app_with_endpoints_off_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spark reads tables only: auditing them alone would report every message billing,
    ledger and notes processed as lost. The run names each store and says to export first."""
    code = main(["run", "--app", f"{__name__}:billing_app", "--quiet"])

    assert code == EXIT_USAGE
    error = capsys.readouterr().err
    assert "['billing'] in PostgreSQL" in error
    assert "['ledger'] in Cosmos DB" in error
    assert "['notes'] in blob documents" in error
    assert "keep their audit rows off tables: export first" in error


@pytest.mark.parametrize(
    "backend", [pytest.param(("memory-blob", "token"), id="memory-blob")], indirect=True
)
async def test_the_stores_open_as_the_app_opens_them(backend: Backend, mode: Mode) -> None:
    """``endpoint_states`` reads blob documents in the app's state account; an endpoint in
    Cosmos DB without an account configured is refused by name."""
    harness, names = await run_orders(backend, mode)

    async with endpoint_states(harness.app, Settings({}, {}), names.all, harness.raw) as states:
        assert sorted(states) == sorted(names.all)
        for name, state in states.items():
            read = sorted([str(e["message_id"]) async for e in state.audit_entities()])
            assert read == sorted(await harness.audit_ids(name))
    with pytest.raises(ConfigurationError, match="BUS_COSMOS_ENDPOINT"):
        async with endpoint_states(billing_app, Settings({}, {}), ["ledger"], harness.raw):
            pass


def flow_in(store: Store) -> tuple[FlowNames, BusApp]:
    """The flow with every endpoint's rows in ``store``, for ``--app``."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    app = build_flow(names)
    for name, endpoint in app.endpoints.items():
        app.endpoints[name] = replace(endpoint, store=store)
    return names, app


BLOB_NAMES, BLOB_FLOW = flow_in("blob")
COSMOS_NAMES, COSMOS_FLOW = flow_in("cosmos")
FLOWS = {
    "blob": ("BLOB_FLOW", BLOB_NAMES, BLOB_FLOW),
    "cosmos": ("COSMOS_FLOW", COSMOS_NAMES, COSMOS_FLOW),
}
"""Per store: the attribute ``--app`` names, the flow's names and its app."""


@pytest.mark.parametrize(
    ("backend", "store"),
    [
        pytest.param(
            ("azurite-blob", "token"), "blob", id="azurite-blob", marks=pytest.mark.azurite
        ),
        pytest.param(
            ("cosmos", "token"),
            "cosmos",
            id="cosmos",
            marks=[pytest.mark.azurite, pytest.mark.cosmos],
        ),
    ],
    indirect=["backend"],
)
async def test_the_export_command_reads_documents_where_the_app_keeps_them(
    backend: Backend,
    mode: Mode,
    store: str,
    azurite: Any,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The command opens the stores from the app's settings, as the app does: blob
    documents in its account, Cosmos DB from ``BUS_COSMOS_*``."""
    attribute, names, app = FLOWS[store]
    harness = await Harness.create(backend, app)
    client = harness.setup_bus.client()
    for i in range(ORDERS):
        await client.send(
            PlaceOrder(order_id=f"o{i}", amount=10), to=names.orders, idempotency_key=f"o{i}"
        )
    await harness.run_until_quiet()
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    if isinstance(harness.cosmos, CosmosDatabase):
        cosmos: CosmosSettings = request.getfixturevalue("cosmos")
        monkeypatch.setenv("BUS_COSMOS_ENDPOINT", str(cosmos.endpoint))
        monkeypatch.setenv("BUS_COSMOS_KEY", str(cosmos.key))
        monkeypatch.setenv("BUS_COSMOS_DATABASE", harness.cosmos.name)
    out = tmp_path / "export"
    options = [
        "--app",
        f"{__name__}:{attribute}",
        "--endpoints",
        ",".join(names.all),
        "--ingress-tables",
        harness.config.ingress_table,
        "--quiet",
    ]

    code = await asyncio.to_thread(main, ["export", "--out", str(out), *options])

    assert code == EXIT_OK
    audit = rows_in(out / "audit")
    assert len(audit) == ORDERS * DELIVERIES_PER_ORDER
    for endpoint in names.all:
        exported = sorted(r["message_id"] for r in audit if r["table"] == endpoint)
        assert exported == sorted(await harness.audit_ids(endpoint))
