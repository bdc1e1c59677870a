"""The operator CLI against Azurite, through ``main(argv)`` as the console script calls it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure.storage.queue.aio import QueueClient

from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import http_ingress
from shared.bus import Bus
from shared.bus.poison import Reason, parked_name, reference_body
from shared.cleanup.checkpoint import Checkpoints
from shared.cli import main
from shared.resources import TABLES, poison_queue
from shared.runtime import bus_config
from shared.sample.app import app as sample_app
from shared.settings import DEV_KEY, StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.cli.in_process import Run, in_process
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

ORDER = '{"order_id": "c1", "customer": "ada", "amount_cents": 700}'
PLACED_ORDER = '{"order_id": "c9", "customer": "eve", "amount_cents": 1}'
PLACED = '{"order_id": "c2", "customer": "bob", "amount_cents": 100}'


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: these tests read the sample app's fixed-name tables


@pytest.fixture
def bus(
    emulator: AzuriteEndpoints,
    sample_project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    """Run ``bus <args>`` on the sample app, from a project folder of its own (its resources
    file, no settings file), the connection string in the environment as an operator should
    give it; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)

    run = in_process(capsys, "--no-progress")

    assert run("provision")[0] == 0
    assert run("subscribe", "--all")[0] == 0
    return run


def account(emulator: AzuriteEndpoints) -> AzureStorageAccount:
    return AzureStorageAccount(StorageSettings(emulator.connection_string))


def test_send_is_exactly_once_per_key(bus: Run) -> None:
    code, out, _ = bus("send", "PlaceOrder", "--to", "orders", "--key", "cli-1", "--body", ORDER)
    assert code == 0
    first = json.loads(out)
    assert first["deduplicated"] is False
    assert len(first["message_ids"]) == 1
    code, out, _ = bus("send", "PlaceOrder", "--key", "cli-1", "--body", ORDER)  # --to inferred
    assert code == 0
    assert json.loads(out) == {**first, "deduplicated": True}


def post_taking(emulator: AzuriteEndpoints, key: str, *, key_scopes: bool) -> http_ingress.Answer:
    """An HTTP caller's POST of another order with ``key``, before `bus send` uses it."""

    async def post() -> http_ingress.Answer:
        async with account(emulator) as storage:
            return await http_ingress.handle(
                Bus(sample_app, storage, replace(bus_config(), ingress_key_scopes=key_scopes)),
                {"Idempotency-Key": key},
                json.dumps({"type": "PlaceOrder", "body": json.loads(PLACED_ORDER)}).encode(),
            )

    return asyncio.run(post())


def test_a_key_an_http_caller_took_first_does_not_swallow_the_send(
    bus: Run, emulator: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a POST with the key made `bus send` answer deduplicated with the caller's
    message id and exit 0, and the real order was dropped. With BUS_INGRESS_KEY_SCOPES on,
    the send is the CLI's own."""
    monkeypatch.setenv("BUS_INGRESS_KEY_SCOPES", "on")
    forged = post_taking(emulator, "reprice-2026-11:17", key_scopes=True)
    assert forged.status == 202

    code, out, _ = bus("send", "PlaceOrder", "--key", "reprice-2026-11:17", "--body", ORDER)

    assert code == 0
    sent = json.loads(out)
    assert sent["deduplicated"] is False
    assert sent["message_ids"] != forged.body["message_ids"]


def test_a_key_an_http_caller_took_first_exits_2_while_key_scopes_are_off(
    bus: Run, emulator: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With BUS_INGRESS_KEY_SCOPES off (the default) the keys are one namespace, but the
    caller's record has a fingerprint: the CLI's different order is refused, not answered
    with the caller's message id."""
    monkeypatch.delenv("BUS_INGRESS_KEY_SCOPES", raising=False)
    forged = post_taking(emulator, "reprice-2026-11:18", key_scopes=False)
    assert forged.status == 202

    code, out, err = bus("send", "PlaceOrder", "--key", "reprice-2026-11:18", "--body", ORDER)

    assert (code, out) == (2, "")
    assert "'reprice-2026-11:18' was already used for a different message" in err


def test_send_with_a_key_used_for_another_message_exits_2_and_sends_nothing(bus: Run) -> None:
    code, out, _ = bus("send", "PlaceOrder", "--key", "cli-twice", "--body", ORDER)
    assert code == 0
    code, out, err = bus("send", "PlaceOrder", "--key", "cli-twice", "--body", PLACED_ORDER)
    assert code == 2
    assert out == ""
    assert "idempotency key 'cli-twice' was already used for a different message" in err
    assert "c9" not in err  # nothing of either message's content


def test_send_with_a_delay_hides_the_message_until_then(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    async def depths() -> tuple[int, int]:
        storage = account(emulator)
        try:
            queue = storage.queue("orders")
            return len(await queue.peek(32)), await queue.approximate_count()
        finally:
            await storage.close()

    visible, total = asyncio.run(depths())
    code, out, _ = bus("send", "PlaceOrder", "--delay", "1h", "--key", "later", "--body", ORDER)
    assert code == 0
    assert json.loads(out)["deduplicated"] is False
    assert asyncio.run(depths()) == (visible, total + 1)  # queued, and hidden


def test_publish_reaches_every_subscriber_and_unsubscribe_takes_one_away(bus: Run) -> None:
    code, out, _ = bus("publish", "OrderPlaced", "--key", "pub-1", "--body", PLACED)
    assert (code, len(json.loads(out)["message_ids"])) == (0, 2)
    code, out, _ = bus("unsubscribe", "orderplaced", "shipping")
    assert (code, out.strip()) == (0, "shipping unsubscribed from orderplaced")
    assert bus("unsubscribe", "orderplaced", "shipping")[1].strip() == (
        "shipping was not subscribed to orderplaced"
    )
    code, out, _ = bus("publish", "OrderPlaced", "--key", "pub-2", "--body", PLACED)
    assert len(json.loads(out)["message_ids"]) == 1
    assert (
        bus("subscribe", "orderplaced", "shipping")[1].strip()
        == "shipping subscribed to orderplaced"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["send", "PlaceOrder", "--body", "{nope"], "--body is not valid JSON"),
        (["send", "PlaceOrder", "--body", "@no/such.json"], "cannot read --body '@no/such.json'"),
        (["send", "Nope", "--body", "{}"], "unknown message type 'Nope'"),
        (["send", "PlaceOrder", "--body", '{"order_id": "x"}'], "invalid PlaceOrder: customer"),
        (["publish", "PlaceOrder", "--body", ORDER], "PlaceOrder is a command: use `send`"),
        (["send", "OrderPlaced", "--body", PLACED], "OrderPlaced is an event: use `publish`"),
        (
            ["send", "OrderPlaced", "--to", "loyalty", "--body", PLACED],
            "OrderPlaced is an event: it is published to its topic's subscribers",
        ),
        (["send", "PlaceOrder", "--key", "a/b", "--body", ORDER], "Idempotency key"),
        (["send", "PlaceOrder", "--delay", "soon", "--body", ORDER], "'soon' is not a delay"),
        (["send", "PlaceOrder", "--delay=-5m", "--body", ORDER], "finite, positive"),
        (["send", "PlaceOrder", "--delay", "nans", "--body", ORDER], "finite, positive"),
        (["send", "PlaceOrder", "--delay", "1e300d", "--body", ORDER], "too long"),
        (["send", "PlaceOrder", "--delay", "20000d", "--body", ORDER], "between 0 and 3650"),
        (["replay", "nosuchendpoint"], "unknown endpoints ['nosuchendpoint']"),
        (["subscribe", "hit", "loyaltee"], "'loyaltee' is no endpoint of this app"),
        (["subscribe", "hit", "loyalty"], "loyalty takes no event of topic hit"),
    ],
)
def test_bad_input_exits_2_with_the_reason(bus: Run, args: list[str], message: str) -> None:
    code, _, err = bus(*args)
    assert code == 2
    assert message in err


def test_a_body_over_the_payload_limit_exits_2_and_sends_nothing(
    bus: Run, emulator: AzuriteEndpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a 1 MB body exited 1, "failed", as if storage had refused it. The limit is
    set low through its setting, so that the body over it stays small."""
    monkeypatch.setenv("BUS_MAX_PAYLOAD_BYTES", str(256 * 1024))
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**json.loads(ORDER), "customer": "x" * 1_000_000}))

    async def sent() -> tuple[int, int, bool]:
        config = bus_config()
        async with account(emulator) as storage:
            tokens = [b async for b in storage.blob_container(config.tokens_container).list()]
            rows = [e async for e in storage.table(config.ingress_table).query_all()]
            depth = await storage.queue("orders").approximate_count()
            return len(tokens), depth, any(e.partition_key.endswith("cli-big") for e in rows)

    before = asyncio.run(sent())
    code, out, err = bus("send", "PlaceOrder", "--key", "cli-big", "--body", f"@{big}")

    assert (code, out) == (2, "")
    assert "PlaceOrder body is 1,000,0" in err
    assert "the limit is 262,144 bytes (BUS_MAX_PAYLOAD_BYTES)" in err
    assert "failed" not in err
    assert asyncio.run(sent()) == before
    assert before[2] is False


def test_usage_errors_exit_2(bus: Run) -> None:
    for args in (["subscribe", "onlytopic"], ["replay"], ["frobnicate"]):
        with pytest.raises(SystemExit) as exited:
            bus(*args)
        assert exited.value.code == 2


def test_poison_shows_in_status_and_replay_moves_it_back(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    async def park() -> None:
        async with account(emulator) as a:
            await a.queue("payments").clear()
            poison = a.queue(poison_queue("payments"))
            await poison.send('{"poison": {"reason": "test"}, "signal": "raw-signal"}')

    asyncio.run(park())
    code, out, _ = bus("status", "--json", "--check")
    assert code == 4
    report = json.loads(out)
    assert report["endpoints"]["payments"]["poison"] == 1
    assert report["tokens_in_flight"] >= 1
    assert bus("status")[1].splitlines()[0].split() == [
        "endpoint",
        "mode",
        "store",
        "queue",
        "poison",
        "records",
    ]

    code, out, _ = bus("replay", "payments")
    assert code == 0
    assert "payments: replayed 1 poison messages" in out

    async def replayed() -> list[str]:
        async with account(emulator) as a:
            return [m.content for m in await a.queue("payments").peek()]

    assert asyncio.run(replayed()) == ["raw-signal"]  # unwrapped to the original signal
    code, out, _ = bus("status", "--json", "--check")
    assert code == 0
    assert json.loads(out)["endpoints"]["payments"]["poison"] == 0


def test_an_event_published_without_subscribers_is_counted_in_status(bus: Run) -> None:
    """Not dropped silently: the receipt lists no message and ``bus status`` counts it."""
    assert bus("unsubscribe", "hit", "leaderboard")[0] == 0
    shot = '{"game_id": "nobody", "position": 1}'
    for key in ("hit-1", "hit-2"):
        code, out, _ = bus("publish", "Hit", "--key", key, "--body", shot)
        assert code == 0
        assert json.loads(out)["message_ids"] == []
    code, out, _ = bus("status", "--json")
    assert code == 0
    assert json.loads(out)["unsubscribed_events"] == {"hit": 2}
    assert "events dropped, topic hit has no subscriber: 2" in bus("status")[1]


def test_replay_skips_and_reports_what_it_cannot_unwrap_and_replays_the_rest(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    """Poison-queue contents come from anyone who can write to the queue: raw non-ASCII text
    (not base64), a damaged wrapper, a reference to a blob that is not a parked original;
    beside a real original the bus parked by reference (a signal naming a token, too large to
    sit beside its reason)."""
    forged = json.dumps({"poison": {"original": "shipping/../tokens/x"}})
    original = '"' * 47_000

    async def park() -> str:
        async with account(emulator) as a:
            await a.queue("shipping").clear()
            await a.queue(poison_queue("shipping")).clear()
            wire = QueueClient.from_connection_string(
                emulator.connection_string, poison_queue("shipping")
            )
            async with wire:
                await wire.send_message("ünïcödé ☃ raw")
            poison = a.queue(poison_queue("shipping"))
            await poison.send('{"poison": [], "signal": "x"}')
            await poison.send(forged)
            reason = Reason("shipping", "signal too long", 1)
            name = parked_name("shipping")
            await a.blob_container("parked").upload(name, original.encode(), {})
            await poison.send(reference_body(reason, name), time_to_live=-1)
            return original

    asyncio.run(park())
    code, out, _ = bus("replay", "shipping", "--dry-run")
    assert code == 0
    lines = out.splitlines()
    assert sum("cannot unwrap it" in line for line in lines) == 2  # found before any move
    assert lines[-2:] == [
        "shipping: would replay 2 poison messages, skipped 2",
        "would replay 2 messages from 1 endpoints, skipped 2",
    ]

    code, out, _ = bus("replay", "shipping")
    assert code == 0
    lines = out.splitlines()
    assert sum("shipping: skipped poison message " in line for line in lines) == 2
    assert "shipping: replayed 2 poison messages, skipped 2" in lines
    assert lines[-1] == "replayed 2 messages from 1 endpoints, skipped 2"

    async def state() -> tuple[list[str], int, int]:
        async with account(emulator) as a:
            sent = [m.content for m in await a.queue("shipping").peek()]
            # What was skipped is visible again once the command ends, for `bus poison list`.
            left = len(await a.queue(poison_queue("shipping")).peek(32))
            parked = len([b async for b in a.blob_container("parked").list("shipping/")])
            await a.queue("shipping").clear()
            await a.queue(poison_queue("shipping")).clear()
            return sent, left, parked

    sent, left, parked = asyncio.run(state())
    assert sorted(sent) == sorted(["ünïcödé ☃ raw", original])
    assert (left, parked) == (2, 0)


def test_status_exits_3_and_names_missing_resources(bus: Run, emulator: AzuriteEndpoints) -> None:
    async def drop() -> None:
        async with account(emulator) as a:
            await a.queue(poison_queue("loyalty")).delete_queue()

    asyncio.run(drop())
    code, out, _ = bus("status")
    assert code == 3
    assert "missing: queue loyalty-poison (run `bus provision`)" in out
    assert bus("provision")[0] == 0
    assert bus("status")[0] == 0


def test_cleanup_runs_one_pass_and_reports_it(bus: Run) -> None:
    code, out, err = bus("cleanup", "--grace-seconds", "0", "--json")
    assert code == 0
    assert "cleanup: running" in err
    assert isinstance(json.loads(out), dict)  # the pass's report, as JSON


def test_storage_refusals_exit_1(emulator: AzuriteEndpoints, sample_project: Path) -> None:
    wrong_key = emulator.connection_string.replace(DEV_KEY, "d3Jvbmcga2V5")
    assert main(["--connection-string", wrong_key, "--no-progress", "status"]) == 1


def test_help_and_the_module_entry_point(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "shared.cli", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert "exit codes: 0 done, 1 failed" in result.stdout
    for command in (
        "send",
        "publish",
        "subscribe",
        "unsubscribe",
        "status",
        "poison",
        "replay",
        "cleanup",
        "verify",
        "console",
    ):
        assert command in result.stdout


def test_cleanup_names_a_task_leased_by_a_live_instance_exits_5_and_can_wait_for_it(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    async def hold(task: str) -> None:
        async with account(emulator) as storage:
            table = storage.table(TABLES["cleanup"])
            await table.create_if_missing()
            held = await Checkpoints(table, lease_seconds=3).acquire(
                task, "other-instance", datetime.now(UTC)
            )
            assert held is not None

    asyncio.run(hold("ingress"))
    code, out, err = bus("cleanup", "--grace-seconds", "0")
    assert code == 5
    [line] = [line for line in err.splitlines() if "leased" in line]
    assert line.startswith("cleanup: ingress is leased by another live instance (other-instance")
    assert "--wait" in line

    asyncio.run(hold("ingress"))
    code, out, err = bus("cleanup", "--grace-seconds", "0", "--wait", "--json")
    assert code == 0, err
    [ingress] = [t for t in json.loads(out)["tasks"] if t["task"] == "ingress"]
    assert ingress["finished"]
    assert ingress["leased_by"].startswith("other-instance until")
