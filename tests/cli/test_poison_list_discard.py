"""``bus poison list`` pages through every parked message and groups them; ``bus poison
discard`` archives one with who, when and why before deleting it; hostile content is shown
escaped; a crash between the archive and the delete loses nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus.discard import (
    Discard,
    DiscardFilter,
    DiscardPlaces,
    archive_name,
    discard_parked,
)
from shared.bus.journal import Journal
from shared.bus.parked_pass import LOOK_SECONDS
from shared.bus.poison import Reason, poison_body
from shared.resources import CONTAINERS, TABLES, poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.instrumented import (
    Fault,
    Instrumentation,
    InstrumentedAccount,
    SimulatedCrash,
    fault_at_first,
)
from tests.cli.in_process import Run, in_process
from tests.cli.test_cli_account import run as run_bus
from tests.conftest import Backend, started_azurite, unique_name

PARKED = 500
TYPES = ("ChargePayment", "RefundPayment")
ERRORS = ("KeyError", "TimeoutError", "ValueError", "RuntimeError", "OSError")
HOSTILE = "\x1b[2J<script>alert(1)</script>\nbus: forged line\r\x07"


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: the sample app's poison queues have fixed names


@pytest.fixture
def bus(
    emulator: AzuriteEndpoints,
    sample_project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    """``bus <args>`` on the sample app, its payments poison queue emptied first."""
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)

    run = in_process(capsys, "--no-progress")

    assert run("provision")[0] == 0
    asyncio.run(_clear(emulator))
    return run


async def _clear(emulator: AzuriteEndpoints) -> None:
    async with _account(emulator) as account:
        await account.queue(poison_queue("payments")).clear()


def _account(emulator: AzuriteEndpoints) -> AzureStorageAccount:
    return AzureStorageAccount(StorageSettings(emulator.connection_string))


def parked_content(i: int, reason: str | None = None) -> str:
    signal = json.dumps({"message_id": f"m-{i}", "envelope": json.dumps({"id": f"m-{i}"})})
    why = Reason(
        "payments",
        reason or f"failure {i}",
        5,
        error_type=ERRORS[i % len(ERRORS)],
        message_id=f"m-{i}",
        message_type=TYPES[i % len(TYPES)],
    )
    return poison_body(signal, why)


def park(emulator: AzuriteEndpoints, contents: list[str]) -> None:
    async def send_all() -> None:
        async with _account(emulator) as account:
            poison = account.queue(poison_queue("payments"))
            for start in range(0, len(contents), 50):
                await asyncio.gather(*(poison.send(c) for c in contents[start : start + 50]))

    asyncio.run(send_all())


def waiting(emulator: AzuriteEndpoints) -> int:
    async def count() -> int:
        async with _account(emulator) as account:
            return await account.queue(poison_queue("payments")).approximate_count()

    return asyncio.run(count())


def archived(emulator: AzuriteEndpoints, name: str) -> dict[str, object]:
    async def read() -> dict[str, object]:
        async with _account(emulator) as account:
            blob = await account.blob_container(CONTAINERS["discarded"]).read(name)
            entry: dict[str, object] = json.loads(blob.data)
            entry["keep_until_metadata"] = blob.metadata["keep_until"]
            return entry

    return asyncio.run(read())


@pytest.mark.azurite
def test_list_pages_through_500_parked_messages_and_takes_none(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(PARKED)])

    code, out, _ = bus("poison", "list", "payments", "--all", "--json")
    assert code == 0
    assert sorted(item["message_id"] for item in json.loads(out)) == sorted(
        f"m-{i}" for i in range(PARKED)
    )

    pages: list[list[str]] = []
    for skip in (0, 200, 400):
        code, out, err = bus(
            "poison", "list", "payments", "--json", "--page-size", "200", "--skip", str(skip)
        )
        assert code == 0
        pages.append([item["message_id"] for item in json.loads(out)])
        if skip < 400:
            assert f"--page-size 200 --skip {skip + 200}" in err
        else:
            assert "next page" not in err  # the last page
    assert [len(page) for page in pages] == [200, 200, 100]
    assert len({m for page in pages for m in page}) == PARKED  # a queue nobody changes
    assert waiting(emulator) == PARKED  # looked at, not taken

    code, out, err = bus("poison", "list", "payments")  # the default page, as a table
    assert code == 0
    assert len([line for line in out.splitlines() if " m-" in line]) == 100
    assert "--skip 100" in err


@pytest.mark.azurite
def test_group_counts_every_parked_message_by_type_and_error(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(PARKED)])

    code, out, _ = bus("poison", "list", "payments", "--group", "--json")

    assert code == 0
    groups = json.loads(out)
    assert len(groups) == len(TYPES) * len(ERRORS)  # 2 and 5 are coprime: all 10 pairs
    assert sum(g["count"] for g in groups) == PARKED
    assert {g["count"] for g in groups} == {PARKED // 10}
    assert {(g["message_type"], g["error_type"]) for g in groups} == {
        (t, e) for t in TYPES for e in ERRORS
    }
    table = bus("poison", "list", "payments", "--group")[1]
    assert "ChargePayment" in table
    assert "example reason" in table


@pytest.mark.azurite
def test_discard_archives_with_who_when_why_then_deletes_one_of_500(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(PARKED)])

    code, out, _ = bus(
        "poison", "discard", "--queue", "payments", "--id", "m-450",
        "--reason", "customer refunded by hand", "--by", "ops-ada",
    )  # fmt: skip

    assert code == 0
    [line] = out.splitlines()
    assert line.startswith("discarded payments message m-450 (queue message ")
    assert "by ops-ada at " in line
    assert ": customer refunded by hand; archived as " in line
    assert waiting(emulator) == PARKED - 1
    listed = json.loads(bus("poison", "list", "payments", "--all", "--json")[1])
    assert "m-450" not in {item["message_id"] for item in listed}
    entry = archived(emulator, line.rsplit("archived as ", 1)[1])
    assert entry["reason"] == "customer refunded by hand"
    assert entry["by"] == "ops-ada"
    assert entry["content"] == parked_content(450)
    assert entry["keep_until_metadata"] == str(entry["keep_until"])[:19] + "+00:00"

    code, out, _ = bus("poison", "discard", "--queue", "payments", "--id", "m-450", "--reason", "x")
    assert (code, out.strip()) == (1, "no poison message m-450 in payments")


@pytest.mark.azurite
def test_discard_by_type_and_error_archives_every_match_with_an_audit_line_each(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(PARKED)])

    code, out, _ = bus(
        "poison", "discard", "--queue", "payments", "--type", "RefundPayment",
        "--error-type", "KeyError", "--reason", "refunds retried by hand", "--by", "ops",
    )  # fmt: skip

    assert code == 0
    lines = out.splitlines()
    wanted = {f"m-{i}" for i in range(PARKED) if i % 10 == 5}  # odd: Refund; 5n: KeyError
    assert {line.split()[3] for line in lines} == wanted
    assert len(lines) == len(wanted) == 50
    assert waiting(emulator) == PARKED - 50


def journal(emulator: AzuriteEndpoints) -> list[dict[str, object]]:
    """The newest actions of the journal."""

    async def read() -> list[dict[str, object]]:
        async with _account(emulator) as account:
            _, actions = await Journal(account.table(TABLES["actions"])).page(0, 10)
            return [action.as_json() for action in actions]

    return asyncio.run(read())


@pytest.mark.azurite
def test_discard_and_replay_are_recorded_in_the_action_journal_newest_first(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(3)])

    discarded = bus(
        "poison", "discard", "--queue", "payments", "--id", "m-1",
        "--reason", "a copy of m-0", "--by", "ops-ada",
    )  # fmt: skip
    replayed = bus("replay", "payments", "--id", "m-2", "--by", "ops-bob")

    assert (discarded[0], replayed[0]) == (0, 0)
    newest, before = journal(emulator)[:2]
    assert newest["what"] == "replay"
    assert (newest["who"], newest["endpoint"], newest["count"]) == ("ops-bob", "payments", 1)
    assert "ids m-2" in str(newest["selector"])
    assert newest["reason"] is None
    assert newest["done"] is True
    assert before["what"] == "discard"
    assert (before["who"], before["selector"], before["count"]) == ("ops-ada", "id m-1", 1)
    assert before["reason"] == "a copy of m-0"
    assert str(before["at"]) <= str(newest["at"])


@pytest.mark.azurite
def test_discard_without_a_reason_or_of_an_unknown_endpoint_exits_2(bus: Run) -> None:
    assert bus("poison", "discard", "--queue", "payments", "--id", "m-1", "--reason", " ")[0] == 2
    assert bus("poison", "discard", "--queue", "nowhere", "--id", "m-1", "--reason", "r")[0] == 2
    with pytest.raises(SystemExit) as exited:  # a usage error, as argparse reports them
        bus("poison", "discard", "--queue", "payments", "--reason", "r")
    assert exited.value.code == 2


@pytest.mark.azurite
def test_hostile_bodies_names_and_reasons_are_shown_escaped(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(1, reason=HOSTILE), f"raw {HOSTILE}"])

    code, out, _ = bus("poison", "list", "payments")
    assert code == 0
    assert "<script>alert(1)</script>" in out  # text, as it is
    assert not {"\x1b", "\r", "\x07"} & set(out)
    assert not any(line.startswith("bus: forged") for line in out.splitlines())

    code, out, _ = bus(
        "poison", "discard", "--queue", "payments", "--id", "m-1", "--reason", HOSTILE,
        "--by", "eve\x1b[1A",
    )  # fmt: skip
    assert code == 0
    [line] = out.splitlines()  # one audit line, whatever the reason held
    assert not {"\x1b", "\r", "\x07"} & set(line)
    assert "<script>alert(1)</script>" in line


@pytest.mark.azurite
def test_the_bus_command_discards_in_a_subprocess(
    bus: Run, emulator: AzuriteEndpoints, sample_project: Path
) -> None:
    park(emulator, [parked_content(7)])
    done = run_bus(
        sample_project,
        *("--no-progress", "poison", "discard", "--queue", "payments", "--id", "m-7"),
        *("--reason", "duplicate of m-6", "--by", "ops"),
        environ={"AzureWebJobsStorage": emulator.connection_string},
    )
    assert done.returncode == 0, done.stderr
    assert "discarded payments message m-7" in done.stdout
    assert waiting(emulator) == 0


async def test_a_crash_between_archive_and_delete_loses_nothing_and_the_next_discard_finishes(
    backend: Backend,
) -> None:
    endpoint = unique_name("discard")[:40]
    poison = backend.account.queue(poison_queue(endpoint))
    await poison.create_if_missing()
    archive = backend.account.blob_container(unique_name("discarded"))
    await archive.create_if_missing()
    places = DiscardPlaces(archive, *_no_tokens(backend))
    for i in range(40):  # deeper than a peek
        await poison.send(parked_content(i))
    crashing = InstrumentedAccount(
        backend.account, Instrumentation(fault_at_first("queue.delete", Fault.CRASH_BEFORE))
    )
    first = Discard("first try", "ops", _now(), _days(90))

    with pytest.raises(SimulatedCrash):
        await discard_parked(
            crashing.queue(poison_queue(endpoint)), endpoint, DiscardFilter("m-39"), places, first
        )

    assert await poison.approximate_count() == 40  # still parked...
    names = [b.name async for b in archive.list()]
    assert len(names) == 1  # ...and archived
    await backend.elapse(LOOK_SECONDS + 1)  # the crashed pass's hold runs out
    second = Discard("second try", "ops", _now(), _days(90))
    report = await discard_parked(poison, endpoint, DiscardFilter("m-39"), places, second)
    [done] = report.discarded
    assert done.already_archived
    assert done.archived_as == names[0]
    assert archive_name(endpoint, done.queue_message_id) == names[0]
    assert json.loads((await archive.read(names[0])).data)["reason"] == "first try"
    assert await poison.approximate_count() == 39


def _no_tokens(backend: Backend) -> tuple[BlobContainer, BlobContainer]:
    """A tokens and a parked-originals container that do not exist: messages with no token."""
    blobs = backend.account.blob_container
    return blobs(unique_name("tokens")), blobs(unique_name("parked"))


def _now() -> datetime:
    return datetime.now(UTC)


def _days(days: int) -> timedelta:
    return timedelta(days=days)
