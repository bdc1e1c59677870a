"""Bulk sends on Azurite with real Spark: each row one message, processed once; a job run
again sends nothing; another job with the same keys sends anew; bad rows are rejected with
why and nothing is sent for them."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shared import http_ingress
from shared.bulk.job import run_send
from shared.bus import Bus
from shared.config import default_bus_config
from shared.sample.app import app as sample_app
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bulk.bus import process_all, queue_depths, sample_bus, states
from tests.bulk.jobs import FIRE_AT, job_options, outcomes, rejects, shots, write_parquet

pytestmark = [pytest.mark.spark, pytest.mark.azurite]


async def test_each_row_becomes_one_message_processed_once(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    rows = shots(60)
    source = write_parquet(tmp_path / "shots.parquet", rows)
    options = job_options(storage, tmp_path, "backfill-1", source)

    summary = await asyncio.to_thread(run_send, options, FIRE_AT, spark)

    assert (summary.read, summary.sent, summary.deduplicated, summary.rejected) == (60, 60, 0, 0)
    assert summary.complete
    # Per row: read its ingress record and the previous version's (none), create the token,
    # insert the record, send.
    assert summary.requests == 5 * 60
    written = outcomes(spark, options)
    assert set(written) == {r["game_id"] for r in rows}
    for game, outcome in written.items():
        assert outcome["idempotency_key"] == f"backfill-1:{game}"
        assert outcome["status"] == "sent"
        assert len(outcome["message_ids"]) == 1
    assert (await queue_depths(account))["shootingrange"] == 60

    again = await asyncio.to_thread(run_send, options, FIRE_AT, spark)

    assert (again.sent, again.deduplicated, again.rejected) == (0, 60, 0)
    assert again.requests == 2 * 60  # per row: read its record, send its signal again
    assert {g: o["message_ids"] for g, o in outcomes(spark, options).items()} == {
        g: o["message_ids"] for g, o in written.items()
    }  # the receipts of the first run: no new message
    # The ingress sends a repeat's signal again (the first send may have been cut short):
    # a second signal of the same message, which the receiver discards.
    assert (await queue_depths(account))["shootingrange"] == 120

    processed = await process_all(account)

    assert processed["processed"] == 120  # 60 FireAt, then 60 Hit or Missed
    # Each repeated signal is discarded. Two copies of one FireAt may run side by side in a
    # batch; the one that resumes sends the outputs' signals again, so a Hit or Missed may
    # arrive twice as well: more discarded copies, never a second processing.
    assert set(processed) <= {"processed", "duplicate", "resumed"}
    assert processed["duplicate"] + processed["resumed"] >= 60
    ranges = await states(account, "shootingrange")
    assert {game: state["shots"] for game, state in ranges.items()} == dict.fromkeys(written, 1)
    scores = await states(account, "leaderboard")
    assert {g: s["hits"] + s["misses"] for g, s in scores.items()} == dict.fromkeys(written, 1)


async def test_another_job_with_the_same_keys_sends_its_own_messages(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    source = write_parquet(tmp_path / "shots.parquet", shots(20))
    first = await asyncio.to_thread(
        run_send, job_options(storage, tmp_path, "first", source), FIRE_AT, spark
    )
    second_options = job_options(storage, tmp_path, "second", source)
    second = await asyncio.to_thread(run_send, second_options, FIRE_AT, spark)

    assert (first.sent, second.sent, second.deduplicated) == (20, 20, 0)
    assert (await queue_depths(account))["shootingrange"] == 40  # 20 messages per job
    keys = {o["idempotency_key"] for o in outcomes(spark, second_options).values()}
    assert keys == {f"second:game-{i:05d}" for i in range(20)}


async def test_an_http_caller_cannot_take_a_jobs_predictable_key(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    """Issue 34: a POST with key ``JOB:KEY`` before the job runs made the job's row answer
    deduplicated with the caller's message; with BUS_INGRESS_KEY_SCOPES on the row sends its
    own, and a run of the job with a row changed under the same key rejects that row instead
    of answering the first."""
    rows = shots(3)
    scoped = replace(default_bus_config(), ingress_key_scopes=True)
    forged = await http_ingress.handle(
        Bus(sample_app, account, scoped),
        {"Idempotency-Key": "reprice-2026-11:game-00001"},
        b'{"type": "FireAt", "to": "shootingrange", "body": {"game_id": "x", "position": 9}}',
    )
    assert forged.status == 202
    source = write_parquet(tmp_path / "shots.parquet", rows)
    options = job_options(storage, tmp_path, "reprice-2026-11", source, bus=scoped)

    first = await asyncio.to_thread(run_send, options, FIRE_AT, spark)

    assert (first.sent, first.deduplicated, first.rejected) == (3, 0, 0)
    sent = outcomes(spark, options)["game-00001"]["message_ids"]
    assert sent != forged.body["message_ids"]

    changed = [rows[0], {**rows[1], "position": 9}, rows[2]]
    again = job_options(
        storage,
        tmp_path / "again",
        "reprice-2026-11",
        write_parquet(tmp_path / "changed.parquet", changed),
        bus=scoped,
    )
    rerun = await asyncio.to_thread(run_send, again, FIRE_AT, spark)

    assert (rerun.sent, rerun.deduplicated, rerun.rejected) == (0, 2, 1)
    [refused] = rejects(again)
    assert refused["row_key"] == "game-00001"
    assert (
        "'reprice-2026-11:game-00001' was already used for a different message"
        in (refused["reason"])
    )
    assert (await queue_depths(account))["shootingrange"] == 1 + 3 + 2


async def test_a_jobs_row_under_a_key_an_http_caller_took_is_rejected_while_off(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    """With BUS_INGRESS_KEY_SCOPES off (the default) the keys are one namespace, but the
    caller's record has a fingerprint: the row is rejected, not answered with its message."""
    forged = await http_ingress.handle(
        sample_bus(account),
        {"Idempotency-Key": "reprice-off:game-00001"},
        b'{"type": "FireAt", "to": "shootingrange", "body": {"game_id": "x", "position": 9}}',
    )
    assert forged.status == 202
    source = write_parquet(tmp_path / "shots.parquet", shots(3))
    options = job_options(storage, tmp_path, "reprice-off", source)

    first = await asyncio.to_thread(run_send, options, FIRE_AT, spark)

    assert (first.sent, first.deduplicated, first.rejected) == (2, 0, 1)
    [refused] = rejects(options)
    assert (
        "'reprice-off:game-00001' was already used for a different message" in (refused["reason"])
    )
    assert (await queue_depths(account))["shootingrange"] == 1 + 2


BAD_ROWS: list[tuple[dict[str, Any], str]] = [
    ({"game_id": None, "position": 1}, "the row has no key"),
    ({"game_id": "", "position": 1}, "the row has no key"),
    ({"game_id": "a/b", "position": 1}, "contains one of / \\ # ?"),
    ({"game_id": "tab\there", "position": 1}, "control character"),
    ({"game_id": "k" * 191, "position": 1}, "at most 190 fit beside job 'rejects-1'"),
    ({"game_id": "out-of-range", "position": 12}, "invalid FireAt: position"),
    ({"game_id": "no-position", "position": None}, "invalid FireAt: position: Field required"),
    ({"game_id": "twice", "position": 1}, "2 rows of the input have this key"),
    ({"game_id": "twice", "position": 2}, "2 rows of the input have this key"),
]


async def test_rows_that_fail_a_check_are_rejected_with_why_and_never_sent(
    spark: Any, account: AzureStorageAccount, storage: StorageSettings, tmp_path: Path
) -> None:
    good = shots(5)
    source = write_parquet(tmp_path / "mixed.parquet", good + [row for row, _ in BAD_ROWS])
    options = job_options(storage, tmp_path, "rejects-1", source)

    summary = await asyncio.to_thread(run_send, options, FIRE_AT, spark)

    assert (summary.read, summary.sent, summary.rejected) == (14, 5, len(BAD_ROWS))
    assert not summary.complete
    found = rejects(options)
    assert len(found) == len(BAD_ROWS)
    for row, why in BAD_ROWS:
        [match] = [
            r
            for r in found
            if r["row"] == _json(row) and why in r["reason"] and r["status"] == "rejected"
        ]
        assert match["row_key"] == (row["game_id"] or None)
    assert (await queue_depths(account))["shootingrange"] == 5
    processed = await process_all(account)
    assert set(await states(account, "shootingrange")) == {r["game_id"] for r in good}
    assert processed == {"processed": 10}


def _json(row: dict[str, Any]) -> str:
    import json

    return json.dumps(row, ensure_ascii=False)
