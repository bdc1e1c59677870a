"""Bulk replay's ``uncertain`` outcome on Azurite with real Spark, reached as a real fault or
an attacker reaches it: a parked original gone from its container or altered in it, and
poison entries written by a hostile hand. The run finishes (exit 1), says what happened for
each message taken, loses nothing (what could not be replayed is still parked), and a run of
the same job once the cause is fixed replays what was waiting exactly once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bulk.cli import EXIT_OK, EXIT_REJECTS, main
from shared.bus.poison import Reason, park, parked_name, reference_body
from shared.resources import poison_queue
from shared.runtime import bus_config
from shared.sample.app import FireAt
from shared.stores.azure import AzureStorageAccount
from tests.bulk.bus import process_all, queue_depths, sample_bus, states
from tests.bulk.test_replay import GAMES, park_shots, poison_list

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

BY_REFERENCE = ["by-reference-gone", "by-reference-altered"]


async def park_by_reference(account: AzureStorageAccount, games: list[str]) -> dict[str, str]:
    """One FireAt per game sent and parked the way ``park`` keeps a message too large to sit
    beside its reason: the signal in the parked-originals container, the poison entry naming
    its blob (the sample app's messages are too small for ``park`` to choose that form
    itself). Returns the blob names by game."""
    client = sample_bus(account).client("cli")
    games_by_id = {}
    for game in games:
        command = FireAt(game_id=game, position=4)
        receipt = await client.send(command, to="shootingrange", idempotency_key=game)
        games_by_id[receipt.message_ids[0]] = game
    blobs = account.blob_container(bus_config().parked_container)
    names = {}
    queue = account.queue("shootingrange")
    for message in await queue.receive(32, visibility_timeout=60):
        message_id = json.loads(message.content)["message_id"]
        reason = Reason("shootingrange", "RuntimeError: failed", 5, "RuntimeError", message_id)
        name = parked_name("shootingrange")
        await blobs.upload(name, message.content.encode("utf-8"), {"endpoint": "shootingrange"})
        await account.queue(poison_queue("shootingrange")).send(reference_body(reason, name))
        await queue.delete(message.id, message.pop_receipt)
        names[games_by_id[message_id]] = name
    assert set(names) == set(games)
    return names


async def replay_command(emulator: AzuriteEndpoints, selection: Path, out: Path) -> int:
    """``python -m shared.bulk replay`` as an operator runs it; its exit code."""
    arguments = ["replay", "--input", str(selection), "--job", "replay-u", "--out", str(out)]
    return await asyncio.to_thread(main, [*arguments, "--quiet", "--master", "local[2,4]"])


def written(spark: Any, out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The run's summary.json and its outcomes by row key."""
    summary = json.loads((out / "summary.json").read_text())
    rows = spark.read.parquet(str(out / "outcomes")).collect()
    return summary, {r["row_key"]: r.asDict() for r in rows}


async def test_parked_originals_gone_or_altered_make_the_replay_uncertain_until_restored(
    spark: Any,
    account: AzureStorageAccount,
    emulator: AzuriteEndpoints,
    sample_project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    await park_shots(account)
    blob_names = await park_by_reference(account, BY_REFERENCE)
    blobs = account.blob_container(bus_config().parked_container)
    kept = {name: (await blobs.read(name)).data for name in blob_names.values()}
    gone, altered = blob_names[BY_REFERENCE[0]], blob_names[BY_REFERENCE[1]]
    await blobs.delete(gone)  # a cleanup rule or an operator removed it
    await blobs.upload(altered, b"\xff\xfe not the signal", {})  # overwritten with bytes
    selection = sample_project / "selection.json"
    selection.write_text(json.dumps(await poison_list(emulator, capsys)))
    out = sample_project / "out"

    assert await replay_command(emulator, selection, out) == EXIT_REJECTS

    summary, outcomes = written(spark, out)
    assert (summary["read"], summary["sent"], summary["uncertain"]) == (8, 0, 8)
    assert {o["status"] for o in outcomes.values()} == {"uncertain"}
    [reason] = {o["reason"] for o in outcomes.values()}
    assert reason.startswith("replayed 6 of 8 taken: ")
    assert f"its original {gone} is not in container parked" in reason
    assert f"its original {altered} is not UTF-8 text" in reason
    assert "uncertain=8" in capsys.readouterr().out
    rejects = [
        json.loads(line)
        for part in (out / "rejects").glob("part-*.json")
        for line in part.read_text().splitlines()
    ]
    assert sorted(r["row_key"] for r in rejects) == sorted(outcomes)
    assert {(r["status"], r["reason"], r["row"]) for r in rejects} == {("uncertain", reason, None)}
    depths = await queue_depths(account)
    assert (depths["shootingrange"], depths[poison_queue("shootingrange")]) == (6, 2)
    left = await poison_list(emulator, capsys)
    assert sorted(item["original"] for item in left) == sorted([gone, altered])
    assert await process_all(account) == {"processed": 12}

    for name, data in kept.items():  # restored from a backup
        await blobs.upload(name, data, {})

    assert await replay_command(emulator, selection, out) == EXIT_OK

    summary, outcomes = written(spark, out)
    assert (summary["sent"], summary["not_waiting"], summary["uncertain"]) == (2, 6, 0)
    assert await poison_list(emulator, capsys) == []
    assert [b.name async for b in blobs.list()] == []  # each deleted once its signal was sent
    assert await process_all(account) == {"processed": 4}
    ranges = await states(account, "shootingrange")
    assert {g: s["shots"] for g, s in ranges.items()} == dict.fromkeys(GAMES + BY_REFERENCE, 1)


def hostile_entries(shadowed: str) -> list[str]:
    """Poison entries written by a hostile hand, each naming a message id as ``bus poison
    list`` reads it: one claims the id of a real parked message and holds no text to send."""
    reason = {"endpoint": "shootingrange", "reason": "planted"}
    return [
        json.dumps({"poison": {**reason, "message_id": shadowed}, "signal": 7}),
        json.dumps({"poison": {**reason, "message_id": "hostile-surrogate"}, "signal": "\ud800"}),
        json.dumps({"poison": {**reason, "message_id": "hostile-path", "original": "tokens/../x"}}),
    ]


async def test_hostile_poison_entries_make_the_replay_uncertain_and_lose_no_real_message(
    spark: Any,
    account: AzureStorageAccount,
    emulator: AzuriteEndpoints,
    sample_project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    client = sample_bus(account).client("cli")
    shot = FireAt(game_id="shadowed", position=2)
    [shadowed] = (await client.send(shot, to="shootingrange", idempotency_key="s")).message_ids
    poison = account.queue(poison_queue("shootingrange"))
    for entry in hostile_entries(shadowed):  # planted before the real one is parked
        await poison.send(entry)
    [message] = await account.queue("shootingrange").receive(1, visibility_timeout=60)
    await park(account, message.content, Reason("shootingrange", "real", 5), "parked")
    await account.queue("shootingrange").delete(message.id, message.pop_receipt)
    await park_shots(account)
    listed = await poison_list(emulator, capsys)
    assert len(listed) == 3 + 1 + len(GAMES)
    selection = sample_project / "selection.json"
    selection.write_text(json.dumps(listed))
    out = sample_project / "out"

    assert await replay_command(emulator, selection, out) == EXIT_REJECTS

    summary, outcomes = written(spark, out)
    # The shadowed id is listed twice (the planted entry and the real one): two selection
    # rows, one id, one outcome. Both entries are taken, so the planted one cannot hold the
    # real one back: the real message goes back to its queue in this run.
    assert (summary["read"], summary["sent"], summary["uncertain"]) == (10, 0, 9)
    [reason] = {o["reason"] for o in outcomes.values()}
    assert reason.startswith(f"replayed {len(GAMES) + 1} of {len(GAMES) + 4} taken: ")
    assert "cannot unwrap it: its 'signal' field is not text" in reason
    assert "its signal is not valid text" in reason
    assert "its reference 'tokens/../x' is not a parked original of this queue" in reason
    left = await poison_list(emulator, capsys)
    assert sorted(item["reason"] for item in left) == ["planted"] * 3
    assert await process_all(account) == {"processed": 2 * len(GAMES) + 2}

    for received in await poison.receive(32, visibility_timeout=60):  # the operator removes
        assert received.content in hostile_entries(shadowed)  # what was planted
        await poison.delete(received.id, received.pop_receipt)

    assert await replay_command(emulator, selection, out) == EXIT_OK

    summary, outcomes = written(spark, out)
    assert (summary["sent"], summary["not_waiting"], summary["uncertain"]) == (0, 9, 0)
    assert await poison_list(emulator, capsys) == []
    assert await process_all(account) == {}
    ranges = await states(account, "shootingrange")
    assert {g: s["shots"] for g, s in ranges.items()} == dict.fromkeys([*GAMES, "shadowed"], 1)
