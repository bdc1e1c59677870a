"""``bus poison show`` on a message whose body its token shares with the other deliveries of
its publish: the body is read from the shared payload and checked against the digest its
token names; an altered payload is reported as altered, never shown. On Azurite, through
``main(argv)`` as the command line runs it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus.pipeline import Outcome
from shared.runtime import Worker
from shared.settings import Settings, StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bus.test_shared_payloads import TEXT
from tests.cli.in_process import Run, in_process
from tests.cli.shared_app import FAILING, HUB, app
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite


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
    """``bus <args>`` for the shared app on provisioned storage."""
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.setenv("BUS_APP", "tests.cli.shared_app:app")
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)

    run = in_process(capsys)

    code, out, _ = run("resources")
    (tmp_path / "resources.json").write_text(out)
    assert run("provision", "--resources-file", str(tmp_path / "resources.json"))[0] == code
    assert run("subscribe", "--all")[0] == 0
    return run


def deliver(emulator: AzuriteEndpoints, endpoint: str, tries: int) -> list[Outcome]:
    """Process what waits at ``endpoint`` as the function app does, on try ``tries``."""

    async def go() -> list[Outcome]:
        settings = StorageSettings(connection_string=emulator.connection_string)
        async with AzureStorageAccount(settings) as account:
            worker = Worker(app, Settings({}, {}), account)
            outcomes = []
            try:
                queue = account.queue(endpoint)
                for message in await queue.receive(32, visibility_timeout=60):
                    body = message.content.encode()
                    outcomes.append(await worker.receive(endpoint, body, tries, None))
                    await queue.delete(message.id, message.pop_receipt)
            finally:
                await worker.close()
            return outcomes

    return asyncio.run(go())


def shown(bus: Run, message_id: str) -> dict[str, Any]:
    code, out, err = bus("poison", "show", message_id, "--json")
    assert code == 0, err
    [parked] = json.loads(out)
    return dict(parked)


def test_show_reads_a_shared_body_from_its_payload_and_reports_an_altered_one(
    bus: Run, emulator: AzuriteEndpoints
) -> None:
    code, out, err = bus(
        "send", "Shout", "--to", HUB, "--key", "cli-shout", "--body", '{"key": "k"}'
    )
    assert code == 0, err
    assert deliver(emulator, HUB, 1) == [Outcome.PROCESSED]
    assert deliver(emulator, FAILING, 5) == [Outcome.POISONED]  # the last try parks it
    code, out, _ = bus("poison", "list", "--json")
    [message_id] = [item["message_id"] for item in json.loads(out)]

    parked = shown(bus, message_id)

    assert parked["body"]["state"] == "shown"
    assert "shared payload" in parked["body"]["note"]
    assert json.loads(parked["body"]["text"]) == {"key": "k", "text": TEXT}
    assert parked["envelope"]["payload"]["size"] == len(
        json.dumps({"key": "k", "text": TEXT}, separators=(",", ":"))
    )

    async def alter() -> None:
        settings = StorageSettings(connection_string=emulator.connection_string)
        async with AzureStorageAccount(settings) as account:
            payloads = account.blob_container("payloads")
            async for blob in payloads.list(f"{HUB}/"):
                await payloads.upload(blob.name, b'{"key": "k", "text": "pay mallory"}')

    asyncio.run(alter())
    altered = shown(bus, message_id)
    code, out, _ = bus("poison", "show", message_id)

    assert altered["body"]["state"] == "altered"
    assert "altered since it was sent" in altered["body"]["note"]
    assert "mallory" not in out
