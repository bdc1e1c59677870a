"""An app of the user's, outside ``shared/``, runs with only BUS_APP set: its resources file,
provisioning, the local host serving function_app.py, the CLI, the cleanup and the audit."""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.audit.cli import main as audit_main
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.cli.in_process import in_process
from tests.conftest import unique_name

pytestmark = pytest.mark.azurite

APP = textwrap.dedent(
    """
    from pydantic import BaseModel

    from shared.bus import BusApp, Command, HandlerContext

    app = BusApp()


    class ReserveStock(Command):
        partition_by = "sku"
        sku: str
        quantity: int


    class RecordReservation(Command):
        partition_by = "sku"
        sku: str
        quantity: int


    class Stock(BaseModel):
        reserved: int = 0


    inventory = app.endpoint("{inventory}", state=Stock)
    ledger = app.endpoint("{ledger}", state=Stock, mode="processed_messages")


    @inventory.handles(ReserveStock)
    def reserve(ctx: HandlerContext[Stock], cmd: ReserveStock) -> None:
        ctx.state.reserved += cmd.quantity
        ctx.send(RecordReservation(sku=cmd.sku, quantity=cmd.quantity), to="{ledger}")


    @ledger.handles(RecordReservation)
    def record(ctx: HandlerContext[Stock], cmd: RecordReservation) -> None:
        ctx.state.reserved += cmd.quantity
    """
)


async def ledger_state(connection: str, table: str, sku: str) -> dict[str, object] | None:
    async with AzureStorageAccount(StorageSettings(connection)) as account:
        found = await account.table(table).query(partition_key=sku, row_keys=["state"])
    return json.loads(str(found.entities[0]["data"])) if found.entities else None


def test_a_users_app_runs_through_the_host_the_cli_the_cleanup_and_the_audit(
    azurite: AzuriteEndpoints,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    package = unique_name("shop")
    inventory, ledger = unique_name("inventory"), unique_name("ledger")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    app_text = APP.replace("{inventory}", inventory).replace("{ledger}", ledger)
    (tmp_path / package / "app.py").write_text(app_text)
    settings = {
        "BUS_APP": f"{package}.app:app",
        "AzureWebJobsStorage": azurite.connection_string,
        "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)

    bus = in_process(capsys, "--no-progress")

    # The repository's resources file lists the sample's endpoints: provisioning refuses it.
    code, _, err = bus("provision")
    assert code == 3
    assert "run `bus resources > infra/resources.json`" in err
    code, out, _ = bus("resources")
    assert json.loads(out)["endpoints"] == [inventory, ledger]
    (tmp_path / "resources.json").write_text(out)
    assert bus("provision", "--resources-file", str(tmp_path / "resources.json"))[0] == 0

    host = HostProcess(
        REPO_ROOT / "function_app.py",
        {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(tmp_path)])},
        tmp_path / "host.log",
    )
    host.start()
    try:
        listed = (tmp_path / "host.log").read_text()
        assert f"{inventory}: queueTrigger on {inventory}" in listed
        assert f"{ledger}: queueTrigger on {ledger}" in listed
        assert "orders" not in listed
        body = json.dumps({"sku": "sku-1", "quantity": 3})
        code, out, err = bus("send", "ReserveStock", "--key", "r1", "--body", body)
        assert code == 0, err
        deadline, state = time.monotonic() + 60, None
        while state is None and time.monotonic() < deadline:
            state = asyncio.run(ledger_state(azurite.connection_string, ledger, "sku-1"))
            time.sleep(0.2)
        assert state == {"reserved": 3}
    finally:
        assert host.stop() == 0

    code, out, _ = bus("status", "--json")
    assert code == 0
    assert sorted(json.loads(out)["endpoints"]) == sorted([inventory, ledger])
    assert bus("cleanup", "--grace-seconds", "0")[0] == 0

    export = tmp_path / "export"
    assert audit_main(["export", "--out", str(export), "--format", "json", "--quiet"]) == 0
    # The audit reads the app's endpoint tables: one audit row each (the ingress table is
    # shared with every app, so it is not counted here).
    written = sorted(p.name for p in (export / "audit").iterdir())
    assert written == sorted([f"{inventory}-000000.json", f"{ledger}-000000.json"])
