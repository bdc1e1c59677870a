"""The operator's read-only views through ``bus``: a parked message shown whole (``poison
show``), an endpoint's rows of one partition in every mode and store (``state``), the poison
list on a narrow terminal, and the log lines that name the bus's message id. Against Azurite
(and PostgreSQL), through ``main(argv)`` as the command line runs it."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.functions.queue import QueueMessage

from lab.local.azurite import AzuriteEndpoints
from shared.bindings import blueprint
from shared.bus import BusApp
from shared.bus.pipeline import Outcome
from shared.bus.poison import Reason, parked_name, poison_body, reference_body
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.settings import Settings, StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.cli.in_process import Run, in_process
from tests.cli.modes_app import ENDPOINTS, postgres_app, table_app
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

APPS = {"table": table_app, "postgres": postgres_app}


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # its own: these apps' queues are emptied by the tests


@pytest.fixture
def bus(
    emulator: AzuriteEndpoints,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Run:
    """``bus <args>`` for the table app on provisioned storage, its poison queues empty;
    returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.setenv("BUS_APP", "tests.cli.modes_app:table_app")
    for name in ("BUS_STORAGE_SETTING", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)

    run = in_process(capsys)

    assert provision(run, tmp_path) == 0
    asyncio.run(empty(emulator))
    return run


def provision(bus: Run, folder: Path) -> int:
    """``bus provision`` of the configured app, its resources file written first."""
    code, out, _ = bus("resources")
    (folder / "resources.json").write_text(out)
    return bus("provision", "--resources-file", str(folder / "resources.json"))[0] + code


async def empty(emulator: AzuriteEndpoints) -> None:
    async with account(emulator) as a:
        for endpoint in ENDPOINTS.values():
            await a.queue(poison_queue(endpoint)).clear()
            await a.queue(endpoint).clear()


def account(emulator: AzuriteEndpoints) -> AzureStorageAccount:
    return AzureStorageAccount(StorageSettings(emulator.connection_string))


def send(bus: Run, endpoint: str, **body: Any) -> str:
    """``bus send Count`` to ``endpoint``; the message id it printed."""
    code, out, err = bus(
        "send", "Count", "--to", endpoint, "--key", str(uuid.uuid4()), "--body", json.dumps(body)
    )
    assert code == 0, err
    [message_id] = json.loads(out)["message_ids"]
    return str(message_id)


def deliver(
    emulator: AzuriteEndpoints,
    app: BusApp,
    endpoint: str,
    *,
    last_try: bool = False,
    values: dict[str, str] | None = None,
) -> Outcome:
    """Receive the one message waiting in ``endpoint``'s queue and process it as the
    function app does; on the last try a failure parks it."""

    async def go() -> Outcome:
        async with account(emulator) as a:
            worker = Worker(app, Settings(values or {}, {}), a)
            try:
                [message] = await a.queue(endpoint).receive(1, visibility_timeout=60)
                tries = worker.config.max_dequeue_count or 5 if last_try else 1
                body = message.content.encode()
                outcome = await worker.receive(endpoint, body, tries, message.inserted_on)
                await a.queue(endpoint).delete(message.id, message.pop_receipt)
                return outcome
            finally:
                await worker.close()

    return asyncio.run(go())


def parked_failure(bus: Run, emulator: AzuriteEndpoints, key: str) -> str:
    """A message sent with ``bus send`` whose handler fails on its last try: parked inline,
    its token claimed and kept. Its message id."""
    message_id = send(bus, "tally", key=key, note="é \x1b[2J", fail=True)
    assert deliver(emulator, table_app, "tally", last_try=True) is Outcome.POISONED
    return message_id


def shown_json(bus: Run, message_id: str) -> dict[str, Any]:
    code, out, err = bus("poison", "show", message_id, "--json")
    assert code == 0, err
    [parked] = json.loads(out)
    return dict(parked)


def test_show_prints_the_body_read_from_the_token_with_the_reason_and_history(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    message_id = parked_failure(bus, emulator, "k-token")

    code, out, _ = bus("poison", "show", message_id)
    parked = shown_json(bus, message_id)

    assert code == 0
    assert f"message id:           {message_id}" in out
    assert "reason:               RuntimeError: refused k-token" in out
    assert "tries:                5" in out
    assert '  "key": "k-token",' in out  # pretty JSON, indented under the header
    assert "\x1b" not in out
    assert '"note": "é \\u001b[2J"' in out
    assert parked["body"]["state"] == "shown"
    assert json.loads(parked["body"]["text"]) == {
        "key": "k-token",
        "note": "é \x1b[2J",
        "fail": True,
    }
    assert parked["body"]["note"].startswith("read from token ")
    assert parked["token"] == "claimed"  # R4 claimed it before the handler failed
    assert parked["form"] == "inline"
    assert parked["expires_at"] is None  # the bus parks with no expiry
    assert parked["envelope"]["destination"] == "tally"
    assert parked["record"]["error_type"] == "RuntimeError"
    assert parked["record"]["failed_at"]
    assert parked["record"]["enqueued_at"]
    # Looked at, not taken: still there, visible, for the replay.
    assert bus("poison", "show", message_id)[0] == 0
    code, out, _ = bus("poison", "list", "--json")
    assert [item["message_id"] for item in json.loads(out)] == [message_id]


def test_show_reads_the_signals_own_copy_once_the_token_is_gone_and_reports_an_altered_one(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    message_id = parked_failure(bus, emulator, "k-gone")
    token = shown_json(bus, message_id)["signal"]["token"]

    async def alter(data: bytes | None) -> None:
        async with account(emulator) as a:
            tokens = a.blob_container("tokens")
            if data is None:
                await tokens.delete(token)
            else:
                await tokens.upload(token, data)

    forged = b'{"id": "%s", "body": {"key": "k-gone", "amount": 1000000}}' % message_id.encode()
    asyncio.run(alter(forged))
    altered = shown_json(bus, message_id)
    code, out, _ = bus("poison", "show", message_id)

    assert altered["body"]["state"] == "altered"
    assert altered["body"]["text"] is None
    assert "does not match the digest in its name" in altered["body"]["note"]
    assert code == 0
    assert "1000000" not in out

    asyncio.run(alter(None))
    gone = shown_json(bus, message_id)

    assert gone["token"] == "gone"
    assert gone["body"]["state"] == "shown"  # the bus's own signal carries a bound copy
    assert gone["body"]["note"] == "read from the signal's copy of the envelope"
    assert json.loads(gone["body"]["text"])["key"] == "k-gone"


def test_show_reads_an_original_parked_by_reference_from_its_blob(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    message_id = parked_failure(bus, emulator, "k-ref")
    signal = shown_json(bus, message_id)["signal"]
    del signal["etag"]  # a signal re-sent from its outbox record carries no hints

    async def by_reference() -> str:
        async with account(emulator) as a:
            poison = a.queue(poison_queue("tally"))
            await poison.clear()
            name = parked_name("tally")
            await a.blob_container("parked").upload(name, json.dumps(signal).encode())
            reason = Reason("tally", "too large to park inline", 5, message_id=message_id)
            await poison.send(reference_body(reason, name))
            return name

    name = asyncio.run(by_reference())
    parked = shown_json(bus, message_id)

    assert parked["form"] == "reference"
    assert parked["record"]["original"] == name
    assert json.loads(parked["body"]["text"])["key"] == "k-ref"


def test_hostile_wrappers_and_huge_texts_are_shown_escaped_and_cut(
    bus: Run, emulator: AzuriteEndpoints, tmp_path: Path
) -> None:
    forged = json.dumps(
        {
            "poison": {
                "reason": "x\n2026-11-25 ERROR forged line\x1b[2J\u2028",
                "message_id": "m-forged",
                "original": "../tokens/someone-elses",
            }
        }
    )
    huge = poison_body(
        "y" * 30_000 + "\n\x1b]0;title\x07", Reason("tally", "not a signal", 1, message_id="m-huge")
    )

    async def park() -> None:
        async with account(emulator) as a:
            for content in (forged, huge):
                await a.queue(poison_queue("tally")).send(content)

    asyncio.run(park())

    code, out, _ = bus("poison", "show", "m-forged")
    assert code == 0
    lines = out.splitlines()
    assert not any(line.startswith("2026-11-25") for line in lines)  # no forged line
    assert "reason:               x\\n2026-11-25 ERROR forged line\\x1b[2J\\u2028" in lines
    assert "\x1b" not in out
    assert "\u2028" not in out
    assert "unreadable" in out
    assert "not a parked original of this queue" in out

    whole = tmp_path / "body.txt"
    code, out, _ = bus("poison", "show", "m-huge", "tally", "--body-file", str(whole))
    assert code == 0
    assert "more characters: --body-file PATH writes it" in out
    assert len(out) < 12_000
    assert "\x07" not in out
    assert "\x1b" not in out
    assert whole.read_text(encoding="utf-8") == "y" * 30_000 + "\n\x1b]0;title\x07\n"


def test_show_finds_a_message_deeper_than_a_peek_and_leaves_every_one_visible(
    bus: Run, emulator: AzuriteEndpoints, tmp_path: Path
) -> None:
    """A queue shows its first 32 messages without taking them: the 40th is found by
    receiving in turn, and each is made visible again at the end of the look."""
    contents = [
        poison_body("{}", Reason("tally", "why", 5, message_id=f"m-{n}")) for n in range(40)
    ]

    async def park() -> None:
        async with account(emulator) as a:
            for content in contents:
                await a.queue(poison_queue("tally")).send(content)

    async def visible() -> int:
        async with account(emulator) as a:
            taken = await a.queue(poison_queue("tally")).receive(32, visibility_timeout=1)
            return len(taken)

    asyncio.run(park())

    assert shown_json(bus, "m-39")["record"]["message_id"] == "m-39"
    code, _, err = bus("poison", "show", "m-3", "--body-file", str(tmp_path / "no" / "such"))
    assert code == 2
    assert "--body-file" in err
    assert asyncio.run(visible()) == 32  # none left hidden by the looks


def test_show_exits_1_when_no_poison_message_has_the_id(bus: Run) -> None:
    code, out, _ = bus("poison", "show", "no-such-id")
    assert code == 1
    assert "no poison message no-such-id in" in out
    assert bus("poison", "show", "x", "nosuchendpoint")[0] == 2


def test_poison_list_on_a_narrow_terminal_keeps_every_id_whole(
    bus: Run, emulator: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    reasons = [f"RuntimeError: {n} " + "the payment provider said no " * 30 for n in range(3)]

    async def park() -> None:
        async with account(emulator) as a:
            for message_id, reason in zip(ids, reasons, strict=True):
                why = Reason(
                    "tallyprocessed",
                    reason,
                    5,
                    message_id=message_id,
                    message_type="CountTheDeliveriesOfEveryOrderPlacedToday",
                )
                await a.queue(poison_queue("tallyprocessed")).send(poison_body("{}", why))

    asyncio.run(park())
    monkeypatch.setenv("COLUMNS", "60")

    code, out, _ = bus("poison", "list")
    code_json, listed, _ = bus("poison", "list", "--json")

    assert code == code_json == 0
    for message_id in ids:
        assert message_id in out  # whole, on one line
    assert "... (cut: --json shows it whole)" in " ".join(out.split())
    assert len(out.splitlines()) > 3 * 5  # the reasons wrapped onto further lines
    assert sorted(item["reason"] for item in json.loads(listed)) == sorted(reasons)


@pytest.mark.parametrize("store", ["table", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_state_shows_the_rows_of_one_partition_in_every_mode(
    bus: Run,
    emulator: AzuriteEndpoints,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    store: str,
    tmp_path: Path,
) -> None:
    values: dict[str, str] = {}
    if store == "postgres":
        values["BUS_POSTGRES_URL"] = request.getfixturevalue("postgres")
        monkeypatch.setenv("BUS_POSTGRES_URL", values["BUS_POSTGRES_URL"])
        monkeypatch.setenv("BUS_APP", "tests.cli.modes_app:postgres_app")
        assert provision(bus, tmp_path) == 0
    key = f"p-{uuid.uuid4()}"
    sent: dict[str, str] = {}
    for mode, endpoint in ENDPOINTS.items():
        sent[mode] = send(bus, endpoint, key=key)
        assert deliver(emulator, APPS[store], endpoint, values=values) is Outcome.PROCESSED

    shown: dict[str, Any] = {}
    for mode, endpoint in ENDPOINTS.items():
        code, out, err = bus("state", endpoint, key, "--json")
        assert code == 0, err
        shown[mode] = json.loads(out)
        assert (shown[mode]["store"], shown[mode]["mode"]) == (store, mode)
        assert shown[mode]["account"]["name"] == "devstoreaccount1"
        assert {row["row_key"] for row in shown[mode]["rows"]}
        assert all(row["version"] for row in shown[mode]["rows"])

    def rows(mode: str) -> dict[str, Any]:
        return {row["row_key"]: row["properties"] for row in shown[mode]["rows"]}

    assert rows("token")["state"]["data"] == {"count": 1}
    assert f"audit|{sent['token']}" in rows("token")
    outbox = rows("entity_outbox")["state"]
    assert outbox["data"] == {"count": 1}
    assert sent["entity_outbox"] in outbox["outbox"]
    assert f"processed|{sent['processed_messages']}" in rows("processed_messages")
    assert f"msgidx|{sent['state_based']}" in rows("state_based")
    assert any(k.startswith("version|") for k in rows("state_based"))

    code, out, _ = bus("state", "tally", key)
    assert code == 0
    assert f"partition '{key}' of endpoint tally ({store}), mode token" in out
    assert '    "count": 1' in out
    code, out, _ = bus("state", "tally", "no-such-partition")
    assert code == 1
    assert "no rows in partition 'no-such-partition'" in out
    assert bus("state", "tally", "a/b")[0] == 2  # not a partition key
    assert bus("state", "nosuchendpoint", key)[0] == 2


def test_the_failure_line_names_the_bus_message_id_beside_the_queue_message_id(
    bus: Run, emulator: AzuriteEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    message_id = send(bus, "tally", key="k-log", fail=True)

    async def invoke() -> None:
        async with account(emulator) as a:
            worker = Worker(table_app, Settings({}, {}), a)
            [message] = await a.queue("tally").receive(1, visibility_timeout=60)
            app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
            app.register_functions(blueprint(worker))
            [function] = [f for f in app.get_functions() if f.get_function_name() == "tally"]
            queued = QueueMessage(  # type: ignore[no-untyped-call]
                id=message.id, body=message.content.encode(), dequeue_count=1
            )
            try:
                with pytest.raises(RuntimeError, match="refused k-log"):
                    await function.get_user_function()(queued)
            finally:
                await worker.close()

    with caplog.at_level(logging.INFO):
        asyncio.run(invoke())

    [line] = [r.getMessage() for r in caplog.records if "given back to the host" in r.getMessage()]
    assert line.startswith(f"endpoint tally: message {message_id} (queue message ")
    assert "failed on try 1: RuntimeError: refused k-log" in line
