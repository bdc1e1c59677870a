"""``bus state`` on a saga: the partition is an instance, shown by its correlation value with
its status, what started it and its pending timeouts, live and completed, in text and JSON.
Against Azurite, through ``main(argv)`` as the command line runs it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

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


def send_and_deliver(bus: Run, emulator: AzuriteEndpoints, type_name: str, ref: str) -> None:
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

    assert asyncio.run(go()) is Outcome.PROCESSED


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
