"""``python -m shared.bulk``: usage and configuration errors exit 2 before anything is sent;
a run with rejected rows exits 1 and says so in its summary line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bulk.cli import EXIT_ERROR, EXIT_REJECTS, main
from shared.stores.azure import AzureStorageAccount
from tests.bulk.bus import queue_depths

SEND = ["send", "--type", "FireAt", "--to", "shootingrange", "--key-column", "game_id"]


@pytest.fixture
def connected(sample_project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    return sample_project


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        (["--job", "bad:name", "--input", "x.parquet"], "invalid job name 'bad:name'"),
        (["--job", "j", "--input", "x.parquet", "--type", "Nope"], "unknown message type"),
        (["--job", "j", "--input", "x.parquet", "--to", "orders"], "does not handle FireAt"),
    ],
)
def test_a_bad_job_exits_2_saying_why_before_spark_starts(
    connected: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], why: str
) -> None:
    assert main([*SEND, *arguments]) == EXIT_ERROR
    assert why in capsys.readouterr().err


def test_without_a_storage_connection_it_exits_2_naming_the_setting(
    sample_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    assert main([*SEND, "--job", "j", "--input", "x.parquet"]) == EXIT_ERROR
    assert "connection setting AzureWebJobsStorage" in capsys.readouterr().err


@pytest.mark.parametrize("arguments", [["--concurrency", "0"], ["--rows-per-task", "-1"], []])
def test_bad_usage_exits_2(arguments: list[str]) -> None:
    assert main(["send", "--input", "x", *arguments]) == EXIT_ERROR


@pytest.mark.spark
@pytest.mark.azurite
async def test_a_csv_run_with_a_rejected_row_exits_1_and_sends_the_others(
    spark: Any,
    account: AzureStorageAccount,
    emulator: AzuriteEndpoints,
    sample_project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    source = sample_project / "shots.csv"
    source.write_text("game_id,position,note\n007,3,first\n008,4,second\n009,11,out of range\n")
    out = sample_project / "out"
    arguments = ["--job", "csv-1", "--input", str(source), "--out", str(out), "--quiet"]

    code = await asyncio.to_thread(
        main, [*SEND, *arguments, "--body-columns", "game_id", "position"]
    )

    assert code == EXIT_REJECTS
    assert "read=3 sent=2 deduplicated=0 rejected=1" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    # 5 requests for each row sent (both ingress records read, token, record, signal).
    assert (summary["sent"], summary["rejected"], summary["requests_per_row"]) == (2, 1, 3.33)
    [rejected] = [
        json.loads(line)
        for part in (out / "rejects").glob("part-*.json")
        for line in part.read_text().splitlines()
    ]
    assert rejected["row_key"] == "009"  # CSV values stay text: the key keeps its zeros
    assert "position" in rejected["reason"]
    assert (await queue_depths(account))["shootingrange"] == 2


@pytest.mark.spark
@pytest.mark.azurite
async def test_rows_up_to_the_payload_limit_are_sent_and_a_larger_one_is_rejected_naming_it(
    spark: Any,
    account: AzureStorageAccount,
    emulator: AzuriteEndpoints,
    sample_project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a limit of 4 MiB set through its setting, and rows of 3 MiB, 5 MiB and a few bytes
    limit = 4 * 1024 * 1024
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.setenv("BUS_MAX_PAYLOAD_BYTES", str(limit))
    source = sample_project / "orders.csv"
    with source.open("w") as csv:
        csv.write("order_id,customer,amount_cents\n")
        csv.write(f"o-3mib,{'a' * 3 * 1024 * 1024},100\n")
        csv.write(f"o-5mib,{'b' * 5 * 1024 * 1024},200\n")
        csv.write("o-small,ada,300\n")
    out = sample_project / "out"
    arguments = ["--job", "large-1", "--input", str(source), "--out", str(out), "--quiet"]

    # When the job runs
    code = await asyncio.to_thread(
        main, ["send", "--type", "PlaceOrder", "--key-column", "order_id", *arguments]
    )

    # Then the 5 MiB row alone is rejected, saying why, and the other two are sent
    assert code == EXIT_REJECTS
    assert "read=3 sent=2 deduplicated=0 rejected=1" in capsys.readouterr().out
    [rejected] = [
        json.loads(line)
        for part in (out / "rejects").glob("part-*.json")
        for line in part.read_text().splitlines()
    ]
    assert rejected["row_key"] == "o-5mib"
    assert f"the limit is {limit:,} bytes (BUS_MAX_PAYLOAD_BYTES)" in rejected["reason"]
    assert len(rejected["row"]) <= 10_000  # the row is kept cut, not whole
    assert (await queue_depths(account))["orders"] == 2
    sizes = [b.size async for b in account.blob_container("tokens").list()]
    assert sorted(sizes)[-1] > 3 * 1024 * 1024  # the 3 MiB body travelled in its token
