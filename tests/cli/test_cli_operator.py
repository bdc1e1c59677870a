"""The operator's view through ``bus``: closed pipes, options after the command, poison
messages listed and replayed selectively, short cleanup output, per-mode status, and the
exit code before provisioning. Against Azurite, through ``main(argv)`` or the real process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.bus.poison import Reason, error_reason, poison_body
from shared.bus.poison import park as park_message
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.queue import QueueMessage
from tests.cli.in_process import Run, in_process
from tests.conftest import started_azurite
from tests.test_no_assert import outbox_entity, with_property

pytestmark = pytest.mark.azurite

ORDER = '{"order_id": "c1", "customer": "ada", "amount_cents": 700}'


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: these tests read the sample app's fixed names


def account_line(emulator: AzuriteEndpoints) -> str:
    """What ``bus`` says on stderr first, with the connection string in the environment."""
    return (
        f"bus: account devstoreaccount1 ({emulator.blob}/devstoreaccount1) "
        "from AzureWebJobsStorage in the environment\n"
    )


@pytest.fixture
def bare(
    emulator: AzuriteEndpoints,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    """Run ``bus <args>`` as given (no provisioning), the connection string in the
    environment; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)

    return in_process(capsys)


@pytest.fixture
def bus(bare: Run, emulator: AzuriteEndpoints) -> Run:
    """As ``bare``, on provisioned storage with every poison queue empty."""
    assert bare("provision")[0] == 0

    async def empty() -> None:
        async with account(emulator) as a:
            for endpoint in ("orders", "payments", "shipping", "loyalty"):
                await a.queue(poison_queue(endpoint)).clear()
                await a.queue(endpoint).clear()

    asyncio.run(empty())
    return bare


def account(emulator: AzuriteEndpoints) -> AzureStorageAccount:
    return AzureStorageAccount(StorageSettings(emulator.connection_string))


def signal(message_id: str, message_type: str | None = None) -> str:
    """A signal as the bus writes it; with a type, it carries its envelope copy."""
    data = {
        "message_id": message_id,
        "attempt_id": "a-" + message_id,
        "token": f"tokens/x/{message_id}",
        "partition_key": "p1",
    }
    if message_type is not None:
        data["etag"] = '"0x1"'
        data["envelope"] = json.dumps({"id": message_id, "type": message_type})
    return json.dumps(data)


def park(emulator: AzuriteEndpoints, endpoint: str, *contents: str) -> None:
    async def go() -> None:
        async with account(emulator) as a:
            for content in contents:
                await a.queue(poison_queue(endpoint)).send(content)

    asyncio.run(go())


def contents(emulator: AzuriteEndpoints, queue: str) -> list[str]:
    async def go() -> list[str]:
        async with account(emulator) as a:
            return [m.content for m in await a.queue(queue).peek(32)]

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("args", "poisoned", "code"),
    [
        (["status", "--json"], False, 0),
        (["poison", "list", "--json"], False, 0),
        (["cleanup", "--json"], False, 0),
        (["status", "--json", "--check"], True, 4),  # the command's verdict stands
    ],
)
@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_a_closed_stdout_ends_the_command_quietly(
    bus: Run,
    emulator: AzuriteEndpoints,
    args: list[str],
    poisoned: bool,
    code: int,
    buffered: bool,
) -> None:
    """``bus status --json | head``: the reader leaving is not a failure, and no traceback,
    whether the write fails at once (unbuffered) or at the last flush (buffered)."""
    if poisoned:
        park(emulator, "orders", signal("m-1"))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shared.cli",
            "--connection-string",
            emulator.connection_string,
            *args,
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=60)
    assert b"BrokenPipe" not in err
    assert b"Traceback" not in err
    assert process.returncode == code


def test_progress_options_are_accepted_after_the_command(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    code, _, err = bus("--no-progress", "status", "--progress")
    assert code == 0
    assert "9/9" in err  # the bar was drawn, to the end (one step is the performer's)
    code, _, err = bus("status", "--no-progress")
    assert (code, err) == (0, account_line(emulator))


def test_replay_mentions_only_the_endpoints_it_replayed(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    park(emulator, "payments", signal("m-1"))
    code, out, err = bus("replay", "--all", "--progress")
    assert code == 0
    assert out.splitlines() == [
        "payments: replayed 1 poison messages",
        "replayed 1 messages from 1 endpoints",
    ]
    assert "replay payments" in err
    assert "replay orders" not in err  # no bar (nor blank line) where nothing waits
    code, out, err = bus("replay", "--all", "--progress")
    assert (code, out, err) == (0, "nothing to replay\n", account_line(emulator))


def test_poison_list_shows_why_each_message_was_parked_and_takes_none(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    """Each form as its writer parks it: the pipeline's last error (``error_reason`` with the
    id and type it knew), a refusal too large to park whole (an excerpt), the local host's
    move (the id it read), the Functions host's raw signal, and contents nobody should have
    written."""
    last_error = poison_body(
        signal("m-wrapped"),
        error_reason(
            "payments",
            RuntimeError("provider down"),
            5,
            message_id="m-wrapped",
            message_type="ChargePayment",
            enqueued_at=datetime(2026, 11, 23, 15, 40, 2, tzinfo=UTC),
            failed_at=datetime(2026, 11, 23, 15, 50, 37, tzinfo=UTC),
        ),
    )
    by_host = poison_body(
        signal("m-local", "ChargePayment"),
        Reason("payments", "TimeoutError: handler timed out", 3, "TimeoutError", "m-local"),
    )
    garbage = "[bold red]not json[/] \x1b[2J"
    hostile = json.dumps({"poison": {"reason": "[bold]\x1b[2J" + "x" * 5000}, "signal": 5})
    park(emulator, "payments", last_error, by_host, signal("m-host", "ChargePayment"))
    park(emulator, "payments", garbage, hostile)

    async def too_large() -> None:
        refusal = Reason("payments", "signal is 70000 characters", 1, message_id="m-big")
        async with account(emulator) as a:
            assert await park_message(a, "x" * 70_000, refusal, "parked") == "excerpt"

    asyncio.run(too_large())

    code, out, _ = bus("poison", "list", "payments", "--json")
    assert code == 0
    listed = {item["message_id"]: item for item in json.loads(out)}
    wrapped = listed["m-wrapped"]
    assert (wrapped["reason"], wrapped["error_type"]) == (
        "RuntimeError: provider down",
        "RuntimeError",
    )
    assert (wrapped["message_type"], wrapped["dequeue_count"]) == ("ChargePayment", 5)
    assert (wrapped["enqueued_at"], wrapped["failed_at"]) == (
        "2026-11-23T15:40:02+00:00",
        "2026-11-23T15:50:37+00:00",
    )
    assert listed["m-host"]["failed_at"] is None  # the host's move says nothing
    assert listed["m-local"]["message_type"] == "ChargePayment"  # from the signal's envelope
    assert listed["m-local"]["dequeue_count"] == 3
    assert listed["m-host"]["reason"] == "failed maxDequeueCount times (moved by the host)"
    assert listed["m-host"]["message_type"] == "ChargePayment"
    assert listed["m-big"]["original"] is None  # no token named: no blob
    assert listed["m-big"]["reason"] == "signal is 70000 characters"
    unreadable = [item for item in json.loads(out) if item["message_id"] is None]
    assert [item["endpoint"] for item in unreadable] == ["payments", "payments"]
    assert all(item["parked_at"] for item in listed.values())

    code, out, _ = bus("poison", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["endpoint", "message", "id"]
    assert "enqueued (UTC)" in lines[0]
    assert "last failure (UTC)" in lines[0]
    [row] = [line for line in lines if "m-wrapped" in line]
    assert row.split()[1:8] == [
        "m-wrapped",
        "ChargePayment",
        "5",
        "2026-11-23",
        "15:40:02",
        "2026-11-23",
        "15:50:37",
    ]
    [moved] = [line for line in lines if "m-host" in line]
    parked_at = datetime.fromisoformat(listed["m-host"]["parked_at"])
    assert moved.split()[4:7] == ["-", *parked_at.strftime("%Y-%m-%d %H:%M:%S").split()]
    assert "RuntimeError: provider down" in row
    assert all(len(line) < 250 for line in lines)  # the hostile one is cut short
    assert "\x1b" not in out
    assert len(contents(emulator, poison_queue("payments"))) == 6  # looked at, not taken


def test_replay_selects_by_id_or_type_and_a_dry_run_moves_nothing(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    charge = poison_body(signal("m-a", "ChargePayment"), Reason("payments", "boom", 5))
    other = poison_body(
        signal("m-b"),
        Reason("payments", "boom", 5, message_id="m-b", message_type="RefundPayment"),
    )
    park(emulator, "payments", charge, other, signal("m-c"))

    code, out, _ = bus("replay", "payments", "--type", "ChargePayment", "--dry-run")
    assert (code, out.splitlines()[0]) == (0, "payments: would replay 1 poison messages")
    assert len(contents(emulator, poison_queue("payments"))) == 3  # visible again at once
    assert contents(emulator, "payments") == []

    code, out, _ = bus("replay", "payments", "--id", "m-c")
    assert (code, out.splitlines()[0]) == (0, "payments: replayed 1 poison messages")
    assert contents(emulator, "payments") == [signal("m-c")]
    code, _, _ = bus("replay", "payments", "--type", "ChargePayment")
    assert code == 0
    assert contents(emulator, "payments") == [signal("m-c"), signal("m-a", "ChargePayment")]
    assert contents(emulator, poison_queue("payments")) == [other]


def test_cleanup_prints_one_summary_line_and_the_report_on_request(bus: Run) -> None:
    code, out, _ = bus("cleanup", "--grace-seconds", "0")
    assert code == 0
    [line] = out.splitlines()
    assert line.startswith("cleanup: removed ")
    assert "complete" in line
    code, out, _ = bus("cleanup", "--grace-seconds", "0", "--json")
    assert code == 0
    assert {"removed", "kept", "tasks", "complete"} <= set(json.loads(out))


def test_cleanup_counts_a_row_it_cannot_judge_and_points_to_the_report_listing_it(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    bad = with_property(outbox_entity(), "status", "committed")  # committed_at missing

    async def table(insert: bool) -> None:
        async with account(emulator) as a:
            orders = a.table("orders")
            await (orders.insert(bad) if insert else orders.delete(bad.partition_key, bad.row_key))

    asyncio.run(table(insert=True))
    try:
        code, out, _ = bus("cleanup")
        assert code == 0
        assert "bad_row 1" in out
        assert out.rstrip().endswith("; bad rows listed by --json")
        code, out, _ = bus("cleanup", "--json")
        [listed] = [row for t in json.loads(out)["tasks"] for row in t["bad_rows"]]
        assert "committed outbox record without committed_at" in listed
    finally:
        asyncio.run(table(insert=False))


def test_status_shows_the_records_of_each_endpoints_mode(bus: Run) -> None:
    code, out, _ = bus("status", "--json")
    assert code == 0
    orders = json.loads(out)["endpoints"]["orders"]
    assert orders["mode"] == "token"
    # The sample's orders is a saga (each order's checkout): its instances are counted too.
    assert set(orders) == {
        "mode",
        "store",
        "queue",
        "poison",
        "outbox_claimed",
        "outbox_committed",
        "saga_instances_live",
        "saga_instances_completed",
        "saga_timeouts_pending",
        "saga_next_timeout_due",
        "saga_not_found",
        "saga_unreadable",
    }
    code, out, _ = bus("status")
    header, _, first = out.splitlines()[:3]
    assert header.split() == ["endpoint", "mode", "store", "queue", "poison", "records"]
    assert first.split()[1] == "token"
    assert "outbox: 0 open" in first


def test_send_before_provision_exits_3_and_says_to_provision(
    bare: Run, emulator: AzuriteEndpoints
) -> None:
    async def unprovision() -> None:
        async with account(emulator) as a:
            await a.blob_container("tokens").delete_container()

    asyncio.run(unprovision())
    code, _, err = bare("send", "PlaceOrder", "--key", "early", "--body", ORDER)
    assert code == 3
    assert "run `bus provision`" in err
    assert bare("provision")[0] == 0
    assert bare("send", "PlaceOrder", "--key", "early", "--body", ORDER)[0] == 0


def test_a_poison_wrapper_of_a_newer_format_is_for_an_upgraded_cli_to_read(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    """Listed, shown and skipped by replay, in the real process, each saying that an upgraded
    version reads it; the wrapper this version reads beside it is replayed."""
    ours = poison_body(signal("m-ours"), Reason("payments", "boom", 5, message_id="m-ours"))
    newer = json.dumps({"v": 3, "poison": {"reason": "boom"}, "shape": "of a later release"})
    park(emulator, "payments", ours, newer)

    connection = emulator.connection_string

    def cli(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "shared.cli", "--connection-string", connection, *args],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "Traceback" not in done.stderr
        return done.returncode, done.stdout

    code, out = cli("poison", "list", "payments", "--json")
    [listed] = [item for item in json.loads(out) if item["newer"]]
    assert code == 0
    assert "format version 3" in listed["reason"]
    assert "an upgraded version reads it" in listed["reason"]

    [queued] = [m for m in peeked(emulator, poison_queue("payments")) if m.content == newer]
    code, out = cli("poison", "show", queued.id, "payments")
    assert code == 0
    assert "an upgraded version reads it" in out

    code, out = cli("replay", "payments")
    assert code == 0
    assert "an upgraded version reads it" in out
    assert "payments: replayed 1 poison messages, skipped 1" in out
    assert contents(emulator, "payments") == [signal("m-ours")]
    assert contents(emulator, poison_queue("payments")) == [newer]


def peeked(emulator: AzuriteEndpoints, queue: str) -> list[QueueMessage]:
    async def go() -> list[QueueMessage]:
        async with account(emulator) as a:
            return await a.queue(queue).peek(32)

    return asyncio.run(go())
