"""``python -m shared.audit run --system FILE``: the audit of a system of two apps on real
emulators. The ``front`` app keeps its endpoint's rows in a state account of its own and
sends to the ``back`` app's endpoint, whose rows are in the messaging account (as a single
app's are). The send is recorded in one state store and its processing in the other: the
system audit matches them, and names the message when the receiving app's row is gone."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from lab.local.azurite import AzuriteEndpoints
from shared.audit.cli import EXIT_ERROR, EXIT_OK, EXIT_VIOLATED, main
from shared.bus import BusApp, HandlerContext, Outcome
from shared.bus.records import AUDIT_PREFIX
from shared.cli.opened import opened_worker
from shared.provisioning import provision
from shared.runtime import Worker
from shared.stores.table import Entity
from shared.system import load_system
from tests.conftest import started_azurite
from tests.test_storage_roles import Bill, PlaceOrder

pytestmark = [pytest.mark.azurite, pytest.mark.spark]

DESK, BILLING = "auditdesk", "auditbilling"


class Total(BaseModel):
    amount: int = 0


def front_app() -> BusApp:
    app = BusApp()
    desk = app.endpoint(DESK, Total)
    app.external_endpoint(BILLING, accepts=[Bill])

    @desk.handles(PlaceOrder)
    def place(ctx: HandlerContext[Total], cmd: PlaceOrder) -> None:
        ctx.state.amount += cmd.amount
        ctx.send(Bill(order=cmd.order, amount=cmd.amount), to=BILLING)

    return app


def back_app() -> BusApp:
    app = BusApp()
    billing = app.endpoint(BILLING, Total)

    @billing.handles(Bill)
    def bill(ctx: HandlerContext[Total], cmd: Bill) -> None:
        ctx.state.amount += cmd.amount

    return app


front, back = front_app(), back_app()


@pytest.fixture(scope="module")
def messaging() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture(scope="module")
def front_state() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


def system_file(folder: Path, messaging: str, front_state: str) -> Path:
    path = folder / "system.json"
    module = __name__
    apps = [
        {
            "name": "front",
            "busApp": f"{module}:front",
            "store": "table",
            "settings": {
                "AzureWebJobsStorage": messaging,
                "BUS_STATE_STORAGE_SETTING": "FrontState",
                "FrontState": front_state,
            },
        },
        {
            "name": "back",
            "busApp": f"{module}:back",
            "store": "table",
            "settings": {"AzureWebJobsStorage": messaging},
        },
    ]
    path.write_text(json.dumps({"apps": apps}))
    return path


async def drain(worker: Worker, endpoint: str) -> Counter[Outcome]:
    """Deliver the endpoint's messages as the queue trigger does: the outcomes."""
    outcomes: Counter[Outcome] = Counter()
    queue = worker.account().queue(endpoint)
    while signals := await queue.receive(16, visibility_timeout=30):
        for signal in signals:
            outcome = await worker.receive(endpoint, signal.content.encode(), signal.dequeue_count)
            await queue.delete(signal.id, signal.pop_receipt)
            outcomes[outcome] += 1
    return outcomes


def audit(*args: str) -> tuple[int, dict[str, Any]]:
    code = main(["run", "--lost-after", "0", "--quiet", *args])
    out = Path(args[args.index("--out") + 1])
    return code, json.loads((out / "summary.json").read_text()) if code != EXIT_ERROR else {}


async def send_across(path: Path) -> Entity:
    """One order placed with the front app, processed there and billed in the back app: the
    back app's audit row of the Bill."""
    sender, receiver = load_system(path, environ={}).load()
    async with (
        opened_worker(sender.app, sender.config, require_resources=False) as sending,
        opened_worker(receiver.app, receiver.config, require_resources=False) as receiving,
    ):
        for worker in (sending, receiving):
            await provision(worker.account(), worker.resources, state=worker.state_account())
        client = sending.bus().client()
        await client.send(PlaceOrder(order="o1", amount=5), to=DESK, idempotency_key="k1")
        assert await drain(sending, DESK) == {Outcome.PROCESSED: 1}
        assert await drain(receiving, BILLING) == {Outcome.PROCESSED: 1}
        # Each app's row is where its app keeps them, and nowhere else.
        desk = sending.state_account().table(DESK)
        assert len([e async for e in desk.query_all(row_key_prefix=AUDIT_PREFIX)]) == 1
        billing = receiving.account().table(BILLING)
        [received] = [e async for e in billing.query_all(row_key_prefix=AUDIT_PREFIX)]
        return received


async def forget(path: Path, row: Entity) -> None:
    """Delete the back app's audit row, as if its message had never been processed."""
    [_, receiver] = load_system(path, environ={}).load()
    async with opened_worker(receiver.app, receiver.config, require_resources=True) as worker:
        await worker.account().table(BILLING).delete(row.partition_key, row.row_key)


def test_a_send_in_one_app_matches_its_processing_in_another(
    spark: Any,
    tmp_path: Path,
    messaging: AzuriteEndpoints,
    front_state: AzuriteEndpoints,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = system_file(tmp_path, messaging.connection_string, front_state.connection_string)
    received = asyncio.run(send_across(path))
    capsys.readouterr()

    code, summary = audit("--system", str(path), "--out", str(tmp_path / "whole"))

    assert code == EXIT_OK, summary
    assert (summary["audit_rows"], summary["ingress_rows"]) == (2, 1)
    assert summary["sent"] == summary["processed"] == 2
    edges = {(e["sender"], e["destination"], e["message_type"]) for e in summary["flow"]}
    assert edges == {("ingress", DESK, "PlaceOrder"), (DESK, BILLING, "Bill")}
    assert "audit (app front) (state): account" in capsys.readouterr().err

    asyncio.run(forget(path, received))
    code, summary = audit("--system", str(path), "--out", str(tmp_path / "broken"))

    assert code == EXIT_VIOLATED
    assert summary["invariants"]["lost"] == 1
    [lost] = summary["samples"]["lost"]
    assert (lost["destination"], lost["message_id"]) == (BILLING, received["message_id"])
    assert (lost["sender"], lost["message_type"]) == (DESK, "Bill")


def test_options_naming_one_app_are_refused_with_a_system(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = system_file(tmp_path, "UseDevelopmentStorage=true", "UseDevelopmentStorage=true")
    for option in (["--app", f"{__name__}:front"], ["--input", str(tmp_path)]):
        code = main(["run", "--system", str(path), *option, "--out", str(tmp_path / "r")])
        assert code == EXIT_ERROR
        assert f"not {option[0]}" in capsys.readouterr().err
