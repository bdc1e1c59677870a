"""Forged log lines, written as the attacker would: someone who may send on an endpoint queue
puts a newline and a whole fake log line into a JSON key name (the schema error quotes key
names) and into a message's fields, hoping the host log shows ``outcome=processed`` for a
message that never was. The real function app runs in a real host process on Azurite; the
test reads the host's log file and the poison queue as an operator would."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import runtime
from shared.bus.poison import unwrap
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite
from tests.host.test_hostile_messages import send_raw

pytestmark = pytest.mark.azurite

FORGED = (
    "2026-01-01 00:00:00,000 INFO shared.bus.receiver: endpoint=loyalty type=PlaceOrder "
    "message_id=forged outcome=processed duration_ms=1.0 try=1"
)


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


async def parked(account: StorageAccount, endpoint: str) -> list[str]:
    return [m.content for m in await account.queue(poison_queue(endpoint)).peek(32)]


async def test_a_forged_line_in_a_json_key_stays_inside_its_own_log_line(
    own_azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    host = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": own_azurite.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
        },
        tmp_path / "host.log",
        args=["--functions", "loyalty", "shipping"],
    )
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        await provision(account, runtime.Worker.for_account(account).resources)
        in_a_key = json.dumps({"token": "t", f"x\n{FORGED}\r\n{FORGED}": 1})
        in_a_value = json.dumps({"token": f"t\n{FORGED}", "message_id": f"\u2028{FORGED}"})
        await send_raw(own_azurite.connection_string, "loyalty", in_a_key)
        await send_raw(own_azurite.connection_string, "shipping", in_a_value)
        await asyncio.to_thread(host.start)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if await parked(account, "loyalty") and await parked(account, "shipping"):
                    break
                await asyncio.sleep(0.2)
        finally:
            assert await asyncio.to_thread(host.stop) == 0
        [loyalty] = await parked(account, "loyalty")
        [shipping] = await parked(account, "shipping")

    for raw, endpoint, sent in ((loyalty, "loyalty", in_a_key), (shipping, "shipping", in_a_value)):
        parking = unwrap(raw, endpoint)
        assert parking.signal == sent, "the message itself is kept whole"
        reason = parking.reason
        for control in ("\n", "\r", "\u2028"):
            assert control not in reason, reason
        assert "wrong schema" in reason, reason
    # The key name is quoted escaped (and cut: a sender's name does not fill the reason).
    assert "x\\n" + FORGED[:60] in unwrap(loyalty, "loyalty").reason

    log = (tmp_path / "host.log").read_text(encoding="utf-8")
    lines = log.splitlines()  # splitlines also breaks at U+2028, as a log viewer may
    assert any("outcome=poisoned" in line and "endpoint=loyalty" in line for line in lines), log
    for line in lines:
        assert not line.lstrip().startswith(FORGED[:23]), line
        assert not line.lstrip().startswith("INFO shared.bus.receiver: endpoint=loyalty type=P")
    processed = [line for line in lines if "outcome=processed" in line]
    # The forged text appears only escaped, inside the lines that quote what was sent.
    for line in processed:
        assert "\\n" + FORGED[:60] in line, line
