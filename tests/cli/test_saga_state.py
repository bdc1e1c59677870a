"""``bus state`` on a saga: the partition is an instance, shown by its correlation value with
its status, what started it and its pending timeouts, live and completed, in text and JSON;
``bus status`` counts a saga's instances and its ``saga_not_found`` messages. Against
Azurite, through ``main(argv)`` as the command line runs it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from lab.local.azurite import AzuriteEndpoints
from shared.bus import BusApp, Command, HandlerContext
from shared.bus.pipeline import Outcome
from shared.runtime import Worker
from shared.settings import Settings, StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.cli.in_process import Run, in_process
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite


class Open(Command):
    partition_by = "ref"
    ref: str


class Close(Command):
    partition_by = "ref"
    ref: str


class Ticket(BaseModel):
    notes: list[str] = []


app = BusApp()
tickets = app.saga("tickets", Ticket, started_by=[Open])


@tickets.handles(Open)
def opened(ctx: HandlerContext[Ticket], msg: Open) -> None:
    ctx.state.notes.append("opened")


@tickets.handles(Close)
def closed(ctx: HandlerContext[Ticket], msg: Close) -> None:
    ctx.complete()


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture
def bus(
    emulator: AzuriteEndpoints,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Run:
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.setenv("BUS_APP", f"{__name__}:app")
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)
    run = in_process(capsys)
    code, out, _ = run("resources")
    (tmp_path / "resources.json").write_text(out)
    assert code == 0
    assert run("provision", "--resources-file", str(tmp_path / "resources.json"))[0] == 0
    return run


def send_and_deliver(
    bus: Run,
    emulator: AzuriteEndpoints,
    type_name: str,
    ref: str,
    outcome: Outcome = Outcome.PROCESSED,
) -> None:
    body = json.dumps({"ref": ref})
    key = str(uuid.uuid4())
    code, _, err = bus("send", type_name, "--to", "tickets", "--key", key, "--body", body)
    assert code == 0, err

    async def go() -> Outcome:
        async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as a:
            worker = Worker(app, Settings({}, {}), a)
            try:
                [message] = await a.queue("tickets").receive(1, visibility_timeout=60)
                outcome = await worker.receive("tickets", message.content.encode(), 1)
                await a.queue("tickets").delete(message.id, message.pop_receipt)
                return outcome
            finally:
                await worker.close()

    assert asyncio.run(go()) is outcome


def test_state_shows_a_saga_instance_live_then_completed(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    ref = f"t-{uuid.uuid4().hex[:8]}"
    send_and_deliver(bus, emulator, "Open", ref)
    code, out, _ = bus("state", "tickets", ref)
    assert code == 0
    assert "saga instance: live, started by message" in out
    assert "pending timeouts: 0" in out

    send_and_deliver(bus, emulator, "Close", ref)
    code, out, _ = bus("state", "tickets", ref, "--json")
    assert code == 0
    instance = json.loads(out)["saga_instance"]
    assert instance["status"] == "completed"
    assert instance["completed_at"]
    assert instance["pending_timeouts"] == []

    code, out, _ = bus("state", "tickets", "never-opened")
    assert code == 1


def saga_status(bus: Run) -> dict[str, Any]:
    code, out, err = bus("status", "--json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)["endpoints"]["tickets"]
    return found


def test_status_counts_a_sagas_instances_and_its_messages_that_found_none(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    before = saga_status(bus)
    live, done = f"t-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    send_and_deliver(bus, emulator, "Open", live)
    send_and_deliver(bus, emulator, "Open", done)
    send_and_deliver(bus, emulator, "Close", done)
    send_and_deliver(bus, emulator, "Close", done, Outcome.SAGA_NOT_FOUND)
    send_and_deliver(bus, emulator, "Close", "never-opened", Outcome.SAGA_NOT_FOUND)

    after = saga_status(bus)
    grew = {
        key: after[key] - before[key]
        for key in (
            "saga_instances_live",
            "saga_instances_completed",
            "saga_not_found",
            "saga_timeouts_pending",
            "saga_unreadable",
        )
    }
    assert grew == {
        "saga_instances_live": 1,
        "saga_instances_completed": 1,
        "saga_not_found": 2,
        "saga_timeouts_pending": 0,
        "saga_unreadable": 0,
    }
    assert after["saga_next_timeout_due"] is None
    code, out, _ = bus("status")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith("tickets")]
    assert f"saga: {after['saga_instances_live']} live, " in line
    assert f"{after['saga_not_found']} saga_not_found" in line
