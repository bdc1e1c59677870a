"""The paged, resumable export, and the command line on top of it."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from shared.audit.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, EXIT_VIOLATED, main
from shared.audit.export import export
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount
from tests.audit.orders import DELIVERIES_PER_ORDER, ORDERS, run_orders
from tests.bus.flow import FlowNames
from tests.bus.harness import Harness
from tests.conftest import Backend


async def exported(tmp_path: Path) -> tuple[Harness, FlowNames, dict[str, Any]]:
    harness, names = await run_orders(Backend("memory", MemoryStorageAccount(ManualClock())))
    tables = {"endpoint_tables": names.all, "ingress_tables": [harness.config.ingress_table]}
    return harness, names, tables


def rows_in(folder: Path) -> list[dict[str, Any]]:
    return list(ds.dataset(str(folder), format="parquet").to_table().to_pylist())


async def test_an_interrupted_export_resumes_without_losing_or_repeating_rows(
    tmp_path: Path,
) -> None:
    harness, names, tables = await exported(tmp_path)
    out = tmp_path / "export"

    first = await export(harness.raw, out, page_size=2, max_pages=3, **tables)
    saved = (out / "_checkpoint.json").read_text()
    second = await export(harness.raw, out, page_size=2, max_pages=2, **tables)
    # A stop between writing a page and saving the checkpoint: the next run redoes that page.
    (out / "_checkpoint.json").write_text(saved)
    final = await export(harness.raw, out, page_size=2, **tables)

    assert (first.complete, second.complete, final.complete) == (False, False, True)
    audit = rows_in(out / "audit")
    assert len(audit) == ORDERS * DELIVERIES_PER_ORDER
    assert len({(r["table"], r["partition_key"], r["message_id"]) for r in audit}) == len(audit)
    assert {r["endpoint"] for r in audit} == set(names.all)
    ingress = rows_in(out / "ingress")
    assert sorted(r["idempotency_key"] for r in ingress) == [f"o{i}" for i in range(ORDERS)]
    # Typed lists in the Parquet files, not JSON text.
    assert all(r["outgoing"][0]["destination"] == names.orders for r in ingress)
    assert all(isinstance(r["caused"], list) for r in audit)
    assert sum(final.rows.values()) == len(audit) + len(ingress)
    again = await export(harness.raw, out, page_size=2, **tables)
    assert again.complete  # a finished export stays finished
    assert again.rows == final.rows


async def test_an_export_can_be_restarted_in_another_format(tmp_path: Path) -> None:
    harness, _, tables = await exported(tmp_path)
    out = tmp_path / "export"
    await export(harness.raw, out, max_pages=1, **tables)

    with pytest.raises(Exception, match="--restart"):
        await export(harness.raw, out, file_format="json", **tables)
    shutil.rmtree(out / "audit")
    result = await export(harness.raw, out, file_format="json", restart=True, **tables)

    assert result.complete
    lines = [
        json.loads(x) for f in (out / "audit").glob("*.json") for x in f.read_text().splitlines()
    ]
    assert len(lines) == ORDERS * DELIVERIES_PER_ORDER


@pytest.mark.spark
@pytest.mark.parametrize("file_format", ["parquet", "json"])
async def test_run_audits_an_export_and_writes_its_outputs(
    spark: Any, tmp_path: Path, file_format: str
) -> None:
    harness, names, tables = await exported(tmp_path)
    out = tmp_path / "export"
    await export(harness.raw, out, file_format=file_format, **tables)  # type: ignore[arg-type]
    report = tmp_path / "report"

    code = main(
        ["run", "--input", str(out), "--format", file_format, "--out", str(report), "--quiet"]
    )

    assert code == EXIT_OK
    summary = json.loads((report / "summary.json").read_text())
    assert summary["verdict"] == "PASS"
    assert summary["sent"] == summary["processed"] == ORDERS * DELIVERIES_PER_ORDER
    html = (report / "report.html").read_text()
    assert html.count("<svg") == 3  # latency histogram, throughput timeline, flow graph
    for outside in ("<script", "src=", 'href="http', "url(http"):  # self-contained
        assert outside not in html
    assert all(ref.startswith("#") for ref in re.findall(r'href="([^"]*)"', html))
    assert names.payments in html


@pytest.mark.spark
async def test_run_exits_1_when_an_invariant_is_violated(spark: Any, tmp_path: Path) -> None:
    harness, names, tables = await exported(tmp_path)
    payments = harness.raw.table(names.payments)
    [row, *_] = [e async for e in payments.query_all(row_key_prefix="audit|")]
    await payments.delete(row.partition_key, row.row_key)  # its ShipOrder becomes a ghost
    out = tmp_path / "export"
    await export(harness.raw, out, **tables)

    report = str(tmp_path / "r")
    code = main(["run", "--input", str(out), "--out", report, "--lost-after", "0", "--quiet"])

    assert code == EXIT_VIOLATED
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["invariants"]["lost"] == 1  # the ChargeCard nobody processed
    assert summary["invariants"]["ghosts"] == 1  # the ShipOrder it can no longer vouch for


def test_help_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == EXIT_OK
    assert "Exit codes" in capsys.readouterr().out
    assert main(["run", "--help"]) == EXIT_OK
    assert "--lost-after" in capsys.readouterr().out
    assert main([]) == EXIT_USAGE
    assert main(["export"]) == EXIT_USAGE  # --out is required
    assert main(["run", "--as-of", "yesterday"]) == EXIT_USAGE
    assert main(["run", "--splits", "0", "--input", "x"]) == EXIT_USAGE


def test_a_missing_storage_setting_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    monkeypatch.delenv("AzureWebJobsStorage__accountName", raising=False)

    assert main(["export", "--out", str(tmp_path)]) == EXIT_USAGE
    assert "AzureWebJobsStorage" in capsys.readouterr().err


@pytest.mark.spark
def test_an_unreadable_input_path_is_a_usage_error(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--input", str(tmp_path / "nothing"), "--quiet"]) == EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.azurite
async def test_the_export_command_reads_azurite(
    azurite: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from shared.settings import StorageSettings
    from shared.stores.azure import AzureStorageAccount

    account = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    try:
        harness, names = await run_orders(Backend("azurite", account))
    finally:
        await account.close()
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    out = tmp_path / "export"
    tables = [
        "--endpoints",
        ",".join(names.all),
        "--ingress-tables",
        harness.config.ingress_table,
    ]

    stopped = await asyncio.to_thread(
        main, ["export", "--out", str(out), "--page-size", "4", "--max-pages", "2", *tables]
    )
    finished = await asyncio.to_thread(main, ["export", "--out", str(out), "--quiet", *tables])

    assert (stopped, finished) == (EXIT_OK, EXIT_OK)
    assert len(rows_in(out / "audit")) == ORDERS * DELIVERIES_PER_ORDER
    assert len(rows_in(out / "ingress")) == ORDERS


@pytest.mark.spark
async def test_a_spark_job_failure_exits_2_not_1(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, _, tables = await exported(tmp_path)
    out = tmp_path / "export"
    await export(harness.raw, out, **tables)
    [page, *_] = sorted((out / "audit").glob("*.parquet"))
    page.write_bytes(b"PAR1 this is not a parquet file PAR1")  # the job fails reading it

    code = main(["run", "--input", str(out), "--out", str(tmp_path / "r"), "--quiet"])

    assert code == EXIT_ERROR
    assert "the Spark job failed" in capsys.readouterr().err
    assert not (tmp_path / "r" / "summary.json").exists()


@pytest.mark.spark
def test_an_empty_export_passes_with_zero_counts(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "export"
    for folder in ("audit", "ingress"):
        (out / folder).mkdir(parents=True)
    from shared.audit.export import _write_page
    from shared.audit.rows import AUDIT_COLUMNS, INGRESS_COLUMNS

    _write_page(out / "audit" / "a.parquet", [], AUDIT_COLUMNS, "parquet")
    _write_page(out / "ingress" / "i.parquet", [], INGRESS_COLUMNS, "parquet")

    code = main(["run", "--input", str(out), "--out", str(tmp_path / "r"), "--quiet"])

    assert code == EXIT_OK
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (summary["verdict"], summary["audit_rows"], summary["sent"]) == ("PASS", 0, 0)
