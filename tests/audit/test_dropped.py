"""Events dropped for want of a subscriber, in the audit: read from the account and from an
export, reported per topic with counts and times in summary.json, on the console and in the
report, with the verdict WARN (exit 3) and a next step whose commands the CLI accepts.

The bus runs on a private Azurite with the resources' default names, as a deployed app does,
so the audit reads them without being told where."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.audit.cli import EXIT_DROPPED, main
from shared.audit.next_steps import NOTHING_TO_DO
from shared.audit.published import latest
from shared.bus import BusApp
from shared.cli import main as bus_main
from shared.clock import ManualClock
from shared.resources import CONTAINERS, RESOURCES_FILE
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.cli.drop_apps import Ring, before
from tests.conftest import Backend, started_azurite

pytestmark = pytest.mark.spark

APPS = {"before": "tests.cli.drop_apps:before", "after": "tests.cli.drop_apps:after"}


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: the app uses the shared resources' fixed names


@pytest.fixture
async def account(emulator: AzuriteEndpoints) -> AsyncIterator[AzureStorageAccount]:
    async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as storage:
        yield storage


async def ring(backend: Backend, app: BusApp, keys: list[str]) -> Harness:
    """The desk publishes one Rang per Ring; in ``before`` nothing takes it: each is dropped."""
    harness = await Harness.create(
        backend, app, tokens_container="tokens", topics_container="topics", ingress_table="ingress"
    )
    for key in keys:
        await harness.setup_bus.client().send(Ring(key=key), to="desk", idempotency_key=key)
        await harness.run_until_quiet()
    return harness


def suggested(text: str) -> list[list[str]]:
    return [shlex.split(command)[1:] for command in re.findall(r"`(bus [^`]+)`", text)]


async def run(*argv: str) -> int:
    """A command line in a thread: it runs its own event loop."""
    return await asyncio.to_thread(main, list(argv))


async def test_the_audit_warns_of_dropped_events_and_its_fix_is_accepted_by_the_cli(
    spark: Any,
    account: AzureStorageAccount,
    emulator: AzuriteEndpoints,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)
    monkeypatch.setenv(APP_SETTING, APPS["before"])
    started = datetime.now(UTC)
    await ring(Backend("azurite", account), before, ["r1", "r2"])
    ended = datetime.now(UTC)

    # Straight from the account, the app known: no endpoint takes Rang.
    code = await run("run", "--out", str(tmp_path / "report"), "--quiet")
    console = capsys.readouterr().out

    assert code == EXIT_DROPPED
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["verdict"] == "WARN"
    assert summary["invariants"] == {"duplicates": 0, "lost": 0, "ghosts": 0, "invalid_rows": 0}
    [dropped] = summary["dropped"]
    assert (dropped["topic"], dropped["dropped"], dropped["takers"]) == ("rang", 2, [])
    first = datetime.fromisoformat(dropped["first_dropped_at"])
    last = datetime.fromisoformat(dropped["last_dropped_at"])
    assert started <= first < last <= ended
    [step] = summary["next_steps"]
    assert NOTHING_TO_DO not in summary["next_steps"]
    assert step.startswith("2 events of topic rang were dropped for want of a subscriber")
    assert "no endpoint of this app takes the events of topic rang" in step
    assert f"  dropped, no subscriber          2  topic rang, first {first.isoformat()}" in console
    assert console.rstrip().endswith("dropped=2 verdict=WARN")
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<h2>Events dropped for want of a subscriber</h2>" in html
    assert '<span class="warn">WARN</span>' in html
    # The verdict and report are published to the account, for the operator console.
    audits = account.blob_container(CONTAINERS["audits"])
    published = await latest(audits)
    assert published is not None
    assert (published.verdict, published.summary) == ("WARN", console.rstrip().splitlines()[-1])
    assert (await audits.read(published.report)).data.decode() == html

    # An export carries the records; audited with the app that now handles Rang, the next
    # step names the subscription, which the CLI then accepts.
    export = str(tmp_path / "export")
    assert await run("export", "--out", export, "--quiet") == 0
    report = str(tmp_path / "again")
    code = await run("run", "--input", export, "--app", APPS["after"], "--out", report, "--quiet")
    capsys.readouterr()

    assert code == EXIT_DROPPED
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["dropped"] == [{**dropped, "takers": ["bell"]}]
    [step] = again["next_steps"]
    assert "bell takes these events but is not subscribed" in step
    assert suggested(step) == [["subscribe", "rang", "bell"]]
    monkeypatch.setenv(APP_SETTING, APPS["after"])
    assert await asyncio.to_thread(bus_main, ["--no-progress", "resources"]) == 0
    resources = capsys.readouterr().out
    await asyncio.to_thread(write_file, tmp_path / RESOURCES_FILE, resources)
    assert await asyncio.to_thread(bus_main, ["--no-progress", "provision"]) == 0
    for args in suggested(step):
        assert await asyncio.to_thread(bus_main, ["--no-progress", *args]) == 0
    assert "bell subscribed to rang" in capsys.readouterr().out

    # Audited without knowing the app, the fix names both cases.
    monkeypatch.delenv(APP_SETTING)
    code = await run("run", "--input", export, "--out", str(tmp_path / "blind"), "--quiet")
    blind = json.loads((tmp_path / "blind" / "summary.json").read_text())
    assert (code, blind["dropped"][0]["takers"]) == (EXIT_DROPPED, None)
    assert "run the audit with --app" in blind["next_steps"][0]


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_in_memory_drops_and_a_hostile_export_are_read_safely(
    spark: Any, tmp_path: Path
) -> None:
    """The account reader on the memory stores; an export's records come from files anyone
    may have written: a name that is no topic is left out, a count that is no positive
    number reads as 0 and a time that is none as unknown, and the audit still runs."""
    from shared.audit.account_source import read_account, read_account_dropped
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.file_source import read_dropped_files

    clock = ManualClock()
    harness = await ring(Backend("memory", MemoryStorageAccount(clock), clock), before, ["r1"])
    frames = await read_account(
        spark, harness.raw, endpoint_tables=["desk"], ingress_tables=["ingress"]
    )
    as_of = datetime.now(UTC)
    summary = run_audit(
        *frames[:2],
        AuditOptions(as_of=as_of, takers=before.routes.takers_of),
        poisoned=frames[2],
        dropped=await read_account_dropped(spark, harness.raw),
    )
    assert summary.verdict == "WARN"
    [drops] = summary.dropped
    at = datetime.fromtimestamp(clock.now, UTC).isoformat()
    assert (drops.topic, drops.dropped, drops.first_dropped_at, drops.last_dropped_at) == (
        "rang",
        1,
        at,
        at,
    )

    folder = tmp_path / "export" / "dropped"
    folder.mkdir(parents=True)
    hostile = [
        {"topic": "rang", "dropped": -4, "first_dropped_at": "soon", "last_dropped_at": None},
        {"topic": "Bad Topic\n`bus replay all`", "dropped": 9},
        {"topic": None, "dropped": 1},
        {"topic": "ok", "dropped": "many", "first_dropped_at": "2026-01-01T12:00:00Z"},
    ]
    (folder / "x.json").write_text("\n".join(json.dumps(r) for r in hostile) + "\n[not json\n")
    dropped = read_dropped_files(spark, str(tmp_path / "export"), "json")
    summary = run_audit(*frames[:2], AuditOptions(as_of=as_of), dropped=dropped)
    assert [(d.topic, d.dropped, d.first_dropped_at, d.takers) for d in summary.dropped] == [
        ("ok", 0, "2026-01-01T12:00:00+00:00", None),
        ("rang", 0, None, None),
    ]
    assert summary.verdict == "WARN"


def test_rows_anyone_may_have_written_never_fail_the_summary() -> None:
    """What Spark hands back from an export: times out of range of UTC, counts of the
    wrong type, names that are no topic, for the console and for commands in the hints."""
    from datetime import timedelta, timezone

    from shared.audit.dropped import dropped_events
    from shared.audit.rows import Row

    edge = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    rows: list[Row] = [
        ("rang", 3, edge, datetime(2026, 1, 1, tzinfo=UTC)),
        ("ok", "7", "2026-01-01", 12),
        ("x\n`bus replay all`", 5, None, None),
        (7, 1, None, None),
    ]

    drops = dropped_events(rows, before.routes.takers_of)

    assert [
        (d.topic, d.dropped, d.first_dropped_at, d.last_dropped_at, d.takers) for d in drops
    ] == [
        ("ok", 0, None, None, []),
        ("rang", 3, None, "2026-01-01T00:00:00+00:00", []),
    ]
