"""Bulk replay on Azurite with real Spark: the poisoned messages a selection names (the
output of ``bus poison list --json``) go back to their queue and are processed once; a run
again finds them gone and sends nothing; what the selection leaves stays parked; rows that
name no poisoned message are rejected with why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bulk.job import run_replay
from shared.bus.poison import Reason, park
from shared.cli.main import main as bus
from shared.resources import poison_queue
from shared.sample.app import FireAt
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bulk.bus import process_all, queue_depths, sample_bus, states
from tests.bulk.jobs import job_options, rejects

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

GAMES = [f"parked-{i}" for i in range(6)]


async def park_shots(account: AzureStorageAccount) -> dict[str, str]:
    """One FireAt per game sent and, before anything processes it, parked in the poison
    queue as the pipeline parks a failing message; their message ids by game."""
    client = sample_bus(account).client("cli")
    ids = {}
    for game in GAMES:
        receipt = await client.send(
            FireAt(game_id=game, position=3), to="shootingrange", idempotency_key=game
        )
        ids[game] = receipt.message_ids[0]
    queue = account.queue("shootingrange")
    for message in await queue.receive(32, visibility_timeout=60):
        message_id = json.loads(message.content)["message_id"]
        reason = Reason("shootingrange", "RuntimeError: the handler failed", 5, "RuntimeError")
        await park(account, message.content, reason, "parked")
        await queue.delete(message.id, message.pop_receipt)
        assert message_id in ids.values()
    return ids


async def poison_list(emulator: AzuriteEndpoints, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    """``bus poison list --json``: what an operator would save as a selection."""
    capsys.readouterr()  # what came before: the jobs' summary lines
    arguments = ["--connection-string", emulator.connection_string, "--no-progress"]
    code = await asyncio.to_thread(bus, [*arguments, "poison", "list", "--json"])
    assert code == 0
    listed: list[Any] = json.loads(capsys.readouterr().out)
    return listed


async def test_poisoned_messages_from_the_poison_list_are_replayed_and_processed_once(
    spark: Any,
    account: AzureStorageAccount,
    storage: StorageSettings,
    emulator: AzuriteEndpoints,
    sample_project: Path,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    ids = await park_shots(account)
    listed = await poison_list(emulator, capsys)
    assert {item["message_id"] for item in listed} == set(ids.values())
    chosen = [item for item in listed if item["message_id"] != ids[GAMES[0]]]  # all but one
    selection = tmp_path / "selection.json"
    selection.write_text(json.dumps(chosen, indent=2))  # as `bus poison list --json` prints
    options = job_options(storage, tmp_path, "replay-1", str(selection), file_format="json")

    summary = await asyncio.to_thread(run_replay, options, spark)

    assert (summary.read, summary.sent, summary.not_waiting, summary.rejected) == (5, 5, 0, 0)
    depths = await queue_depths(account)
    assert (depths["shootingrange"], depths[poison_queue("shootingrange")]) == (5, 1)

    again = await asyncio.to_thread(run_replay, options, spark)

    assert (again.sent, again.not_waiting, again.rejected) == (0, 5, 0)
    assert (await queue_depths(account))["shootingrange"] == 5  # nothing sent again
    processed = await process_all(account)
    assert processed == {"processed": 10}  # five FireAt, five Hit or Missed
    ranges = await states(account, "shootingrange")
    assert {game: state["shots"] for game, state in ranges.items()} == dict.fromkeys(GAMES[1:], 1)
    [left] = await poison_list(emulator, capsys)
    assert left["message_id"] == ids[GAMES[0]]


async def test_selection_rows_that_name_no_poisoned_message_are_rejected_with_why(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    ids = await park_shots(account)
    rows = [
        {"endpoint": "shootingrange", "message_id": ids[GAMES[1]]},
        {"endpoint": "nosuchendpoint", "message_id": ids[GAMES[2]]},
        {"endpoint": None, "message_id": ids[GAMES[3]]},
        {"endpoint": "shootingrange", "message_id": None},
        {"endpoint": "shootingrange", "message_id": "x" * 201},
        {"endpoint": "leaderboard", "message_id": ids[GAMES[4]]},  # not parked there
    ]
    selection = tmp_path / "selection.jsonl"
    selection.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    options = job_options(storage, tmp_path, "replay-2", str(selection), file_format="json")

    summary = await asyncio.to_thread(run_replay, options, spark)

    assert (summary.read, summary.sent, summary.not_waiting) == (7, 1, 1)
    reasons = sorted(r["reason"] for r in rejects(options))
    assert len(reasons) == summary.rejected == 5
    assert any("nosuchendpoint is not an endpoint of the app" in r for r in reasons)
    assert reasons.count("the row names no endpoint") == 2  # the unreadable line names none
    assert "the row names no message id" in reasons
    assert "the message id is longer than 200 characters" in reasons
    depths = await queue_depths(account)
    assert (depths["shootingrange"], depths[poison_queue("shootingrange")]) == (1, 5)


async def test_poisoned_messages_from_an_audit_export_are_replayed_once(
    spark: Any,
    account: AzureStorageAccount,
    storage: StorageSettings,
    emulator: AzuriteEndpoints,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from shared.audit.cli import main as audit

    ids = await park_shots(account)
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    export = tmp_path / "export"
    assert await asyncio.to_thread(audit, ["export", "--out", str(export), "--quiet"]) == 0
    options = job_options(storage, tmp_path, "replay-3", str(export / "poisoned"))

    summary = await asyncio.to_thread(run_replay, options, spark)

    assert (summary.read, summary.sent, summary.not_waiting) == (len(GAMES), len(GAMES), 0)
    assert await process_all(account) == {"processed": 2 * len(GAMES)}
    ranges = await states(account, "shootingrange")
    assert {game: state["shots"] for game, state in ranges.items()} == dict.fromkeys(ids, 1)
