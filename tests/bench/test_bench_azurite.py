"""The bench on Azurite: host processes, per-process memory, results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.bench.modes import AT_LEAST_ONCE, TOKEN, bench_modes, select
from lab.bench.report import results_document, write_results
from lab.bench.runner import Plan, measure
from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount

pytestmark = pytest.mark.azurite


async def test_floor_and_token_run_in_host_processes_on_azurite(
    azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    """Given Azurite, when the floor runs in two host processes and token mode in one, then
    both drain every message, report each process's peak memory, and results.json says how
    they compare."""
    floor, token = select(bench_modes(), [AT_LEAST_ONCE, TOKEN])
    connection = azurite.connection_string
    async with AzureStorageAccount(StorageSettings(connection)) as raw:
        results = [
            await measure(
                raw,
                mode,
                Plan(4, concurrency=4, processes=processes),
                separate_processes=True,
                connection_string=connection,
            )
            for mode, processes in ((floor, 2), (token, 1))
        ]

    for result in results:
        assert result.ok, result.error
        assert result.handled == 8
        assert result.peak_rss_mb is not None
        assert result.peak_rss_mb > 10
    assert results[0].processes == 2
    assert results[0].residue == 0 < results[1].residue
    path = tmp_path / "results.json"
    write_results(path, results_document(results, [], {}))
    assert json.loads(path.read_text())["ratio_token_vs_at_least_once"] > 0


def test_the_per_operation_costs_cover_every_kind_the_pipelines_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Given a fresh Azurite, when every operation kind runs twice, then each has a row with
    the host's and the emulator's CPU and the wall time per operation."""
    from lab.bench.ops import main as ops_main

    assert ops_main(["--count", "2"]) == 0

    rows = capsys.readouterr().out.splitlines()[3:]
    kinds = [" ".join(r.split()[:-3]) for r in rows]
    assert kinds == [
        "queue.send",
        "queue.receive (1 message)",
        "blob.create",
        "blob.read",
        "blob.set_metadata (If-Match)",
        "table.insert",
        "table.get",
        "table.upsert",
        "table.query (1 partition, 2 rows)",
        "table.transact (3 entities)",
        "blob.delete",
        "queue.delete",
    ]
    walls = [float(r.split()[-1]) for r in rows]
    assert all(w > 0 for w in walls)
