"""docs/adopting.md, "Moving an existing app into a system", followed step by step on real
emulators: an app that runs alone on one account, with a message processed and one still
in its queue, becomes the first app of a system; a second app joins with a name and a state
account of its own. Nothing the first app had is lost or redone: its state, its in-flight
message, its client's retry of an earlier send, and both apps' cleanups leave nothing behind
and report nothing as bad.

The messaging account is an emulator of this module's own, so that the cleanups' listing of
the shared containers sees only these apps' blobs."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus import BusApp, HandlerContext, Outcome
from shared.bus.records import AUDIT_PREFIX
from shared.config import build_config
from shared.provisioning import provision
from shared.runtime import Worker
from shared.settings import resolve_settings
from shared.stores.account import StorageAccount
from tests.conftest import started_azurite, unique_name
from tests.test_storage_roles import STATE_SETTING, Bill, Ledger, Order, PlaceOrder

pytestmark = pytest.mark.azurite

REPO = Path(__file__).resolve().parents[1]


def existing_app(orders: str, billing: str | None) -> BusApp:
    """The app as it ran alone (``billing`` None), and as redeployed in step 3: it declares
    the new app's endpoint and bills each order there."""
    app = BusApp()
    taking = app.endpoint(orders, Order)
    if billing is not None:
        app.external_endpoint(billing, accepts=[Bill])

    @taking.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        ctx.state.amount = cmd.amount
        if billing is not None:
            ctx.send(Bill(order=cmd.order, amount=cmd.amount), to=billing)

    return app


def joining_app(name: str, billing: str) -> BusApp:
    app = BusApp(name=name)
    charging = app.endpoint(billing, Ledger, mode="state_based")

    @charging.handles(Bill)
    def bill(ctx: HandlerContext[Ledger], cmd: Bill) -> None:
        ctx.state.billed += cmd.amount

    return app


def worker(app: BusApp, values: dict[str, str]) -> Worker:
    settings = resolve_settings(environ=values, local_file=None)
    return Worker(app, build_config(settings, root=REPO, app_name=app.name))


@pytest.fixture(scope="module")
def messaging() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


@pytest.fixture(scope="module")
def state() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()


async def drain(built: Worker, endpoint: str) -> Counter[Outcome]:
    """Deliver the endpoint's messages as the queue trigger does: the outcomes."""
    outcomes: Counter[Outcome] = Counter()
    account = built.account()
    while signals := await account.queue(endpoint).receive(16, visibility_timeout=30):
        for signal in signals:
            outcome = await built.receive(endpoint, signal.content.encode(), signal.dequeue_count)
            await account.queue(endpoint).delete(signal.id, signal.pop_receipt)
            outcomes[outcome] += 1
    return outcomes


async def state_of(account: StorageAccount, table: str, partition: str) -> dict[str, Any]:
    entity = await account.table(table).get(partition, "state")
    return json.loads(str(entity.properties["data"]))  # type: ignore[no-any-return]


async def test_an_app_alone_joins_a_system_and_loses_nothing(
    messaging: AzuriteEndpoints, state: AzuriteEndpoints
) -> None:
    orders, billing = unique_name("orders"), unique_name("billing")
    alone = {"AzureWebJobsStorage": messaging.connection_string, "CLEANUP_BUDGET_SECONDS": "0"}
    before = worker(existing_app(orders, None), alone)
    await provision(before.account(), before.resources)
    client = before.bus().client()
    first = await client.send(PlaceOrder(order="o1", amount=5), to=orders, idempotency_key="k1")
    assert await drain(before, orders) == {Outcome.PROCESSED: 1}
    await client.send(PlaceOrder(order="o2", amount=7), to=orders, idempotency_key="k2")
    await before.close()  # o2 waits in the queue while the app is redeployed

    # Step 1: the existing app keeps its account (now the system's messaging account), no
    # name and no state setting. Step 2: the new app has a name and a state account of its
    # own, on the same messaging connection. Step 3: each declares the other's endpoints it
    # sends to and is (re)deployed. Step 4: the new app's resources are provisioned.
    joining = {
        **alone,
        "BUS_STATE_STORAGE_SETTING": STATE_SETTING,
        STATE_SETTING: state.connection_string,
    }
    first_app = worker(existing_app(orders, billing), alone)
    second_app = worker(joining_app(unique_name("bill"), billing), joining)
    await provision(second_app.account(), second_app.resources, state=second_app.state_account())
    try:
        # The client's retry of a send made before the move is answered from its record.
        retry = (
            await first_app.bus()
            .client()
            .send(PlaceOrder(order="o1", amount=5), to=orders, idempotency_key="k1")
        )
        assert retry.message_ids == first.message_ids
        assert retry.deduplicated
        # o2 is processed; the retry's signal finds o1 done and resends what it sent (nothing).
        assert (await drain(first_app, orders))[Outcome.PROCESSED] == 1
        assert await drain(second_app, billing) == {Outcome.PROCESSED: 1}

        assert await state_of(first_app.account(), orders, "o1") == {"amount": 5}
        assert await state_of(first_app.account(), orders, "o2") == {"amount": 7}
        assert await state_of(second_app.state_account(), billing, "o2") == {"billed": 7}
        audits = first_app.account().table(orders).query_all(row_key_prefix=AUDIT_PREFIX)
        assert sorted([e.partition_key async for e in audits]) == ["o1", "o2"], "each once"

        reports = await asyncio.gather(
            first_app.cleanup(grace_seconds=0), second_app.cleanup(grace_seconds=0)
        )
        for report in reports:
            assert "bad_origin" not in report["kept"], report["kept"]
        tokens = first_app.account().blob_container(first_app.config.tokens_container)
        assert [b.name async for b in tokens.list()] == [], "tokens left after both cleanups"
    finally:
        await first_app.close()
        await second_app.close()
