"""The export reads the audit rows of endpoints that keep them in PostgreSQL (and in its
in-memory model) into the same Parquet layout as table rows, resumably."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from shared.audit.cli import EXIT_USAGE, main
from shared.audit.export import export
from shared.bus import BusApp
from shared.bus.app import Mode
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.bus.harness import (  # noqa: F401  (fixtures "backend" and "mode")
    SQL_BACKENDS,
    SQL_WINDOW_BACKENDS,
    endpoint_mode,
    per_mode_backend,
)
from tests.conftest import Backend


def rows_in(folder: Path) -> list[dict[str, Any]]:
    return list(ds.dataset(str(folder), format="parquet").to_table().to_pylist())


@pytest.mark.parametrize("backend", SQL_BACKENDS + SQL_WINDOW_BACKENDS, indirect=True)
async def test_sql_audit_rows_export_to_the_table_layout(
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
    # caused is the typed list of deliveries (array<struct> in Spark), read from SQL as well
    assert all(r["caused"] and all(c["destination"] for c in r["caused"]) for r in placed)


billing_app = BusApp()
billing_app.endpoint("billing", store="postgres")
billing_app.endpoint("orders")


def test_a_direct_run_refuses_an_app_with_postgres_endpoints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spark reads tables only: auditing them alone would report every message billing
    processed as lost. The run says to export first instead."""
    code = main(["run", "--app", f"{__name__}:billing_app", "--quiet"])

    assert code == EXIT_USAGE
    error = capsys.readouterr().err
    assert "['billing'] keep their audit rows in PostgreSQL" in error
    assert "export" in error
