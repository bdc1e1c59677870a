"""Two apps of one system on one messaging account: each sends to and publishes for the
other, and both apps' cleanups run at the same time, each judging only what its own
endpoints sent or own (``shared.cleanup.abandoned_tokens``), with its leases and checkpoints
in its own table. Nothing is lost or processed twice, nothing is left behind, and neither
reports the other's tokens as bad."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, replace

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.ids import fresh_id
from shared.cleanup.checkpoint import TASK_PARTITION
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.config import build_config
from shared.settings import resolve_settings
from tests.bus.flow import Ledger, OrderPlaced, PlaceOrder, ShipOrder
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name

ORDERS = 4


class Shipped(Command):
    partition_by = "order_id"
    order_id: str


@dataclass(frozen=True)
class System:
    """Sales (orders) and shipping (dispatch, notices), two apps with their own names."""

    sales: Harness
    shipping: Harness
    cleanups: dict[str, CleanupSettings]
    """Each app's cleanup settings, by app name, as ``build_config`` derives them."""
    suffix: str

    @property
    def orders(self) -> str:
        return f"orders{self.suffix}"

    @property
    def dispatch(self) -> str:
        return f"dispatch{self.suffix}"

    @property
    def notices(self) -> str:
        return f"notices{self.suffix}"

    @property
    def apps(self) -> tuple[Harness, Harness]:
        return self.sales, self.shipping


def sales_app(name: str, suffix: str) -> BusApp:
    app = BusApp(name=name)
    orders = app.endpoint(f"orders{suffix}", state=Ledger)
    app.external_endpoint(f"dispatch{suffix}", accepts=[ShipOrder])
    app.external_endpoint(f"notices{suffix}", accepts=[OrderPlaced])

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Ledger], cmd: PlaceOrder) -> None:
        ctx.state.applied.append(ctx.message_id)
        ctx.send(ShipOrder(order_id=cmd.order_id), to=f"dispatch{suffix}")
        ctx.publish(OrderPlaced(order_id=cmd.order_id, customer=f"c-{cmd.order_id}"))

    @orders.handles(Shipped)
    def shipped(ctx: HandlerContext[Ledger], event: Shipped) -> None:
        ctx.state.applied.append(ctx.message_id)

    return app


def shipping_app(name: str, suffix: str) -> BusApp:
    app = BusApp(name=name)
    dispatch = app.endpoint(f"dispatch{suffix}", state=Ledger)
    notices = app.endpoint(f"notices{suffix}", state=Ledger)
    app.external_endpoint(f"orders{suffix}", accepts=[Shipped])

    @dispatch.handles(ShipOrder)
    def ship(ctx: HandlerContext[Ledger], cmd: ShipOrder) -> None:
        ctx.state.applied.append(ctx.message_id)
        ctx.send(Shipped(order_id=cmd.order_id), to=f"orders{suffix}")

    @notices.handles(OrderPlaced)
    def notice(ctx: HandlerContext[Ledger], event: OrderPlaced) -> None:
        ctx.state.applied.append(ctx.message_id)

    return app


async def system(backend: Backend) -> System:
    """Both apps on ``backend``: the shared containers under names of this test's own (tests
    share one emulator), everything else named as ``build_config`` names it for each app."""
    suffix = unique_name("")[:8]
    shared = {
        "tokens_container": f"tokens{suffix}",
        "topics_container": f"topics{suffix}",
        "payloads_container": f"payloads{suffix}",
        "parked_container": f"parked{suffix}",
    }
    harnesses, cleanups = [], {}
    for make in (sales_app, shipping_app):
        app = make(f"{make.__name__[:4]}{suffix}", suffix)
        config = build_config(resolve_settings(environ={}, local_file=None), app_name=app.name)
        assert config.app_name is not None
        own = {
            "ingress_table": config.bus.ingress_table,
            "actions_table": config.bus.actions_table,
            "discarded_container": config.bus.discarded_container,
            "audits_container": config.bus.audits_container,
            "performer_endpoint": config.bus.performer_endpoint,
        }
        harnesses.append(await Harness.create(backend, app, **shared, **own))
        cleanups[config.app_name] = replace(config.cleanup, grace_seconds=0)
    sales, shipping = harnesses
    return System(sales, shipping, cleanups, suffix)


async def run_until_quiet(system: System) -> None:
    """Each app processes its queues in turn until neither has anything left: what one sends
    the other receives."""
    for _ in range(10):
        for harness in system.apps:
            await harness.run_until_quiet()
        queued = [
            await h.raw.queue(e).approximate_count() for h in system.apps for e in h.app.endpoints
        ]
        if not any(queued):
            return
    raise AssertionError("the two apps did not quiet down")


async def clean(harness: Harness, settings: CleanupSettings, owner: str) -> CleanupReport:
    """One cleanup pass of ``harness``'s app, its clock a little ahead of the stores' so that
    'older than a zero grace' is certain on Azurite (whole-second timestamps)."""
    base = harness.config.clock
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: base() + 2.0),
        settings=settings,
        owner=owner,
    )


async def cleanups(system: System, round_: str) -> list[CleanupReport]:
    """Both apps' cleanups at once, two instances each: the sales app's reports first."""
    return await asyncio.gather(
        *(
            clean(harness, cleanup_of(system, harness), f"{harness.app.name}-{i}-{round_}")
            for harness in system.apps
            for i in range(2)
        )
    )


def cleanup_of(system: System, harness: Harness) -> CleanupSettings:
    assert harness.app.name is not None
    return system.cleanups[harness.app.name]


async def test_two_apps_send_and_publish_to_each_other_and_both_cleanups_leave_nothing(
    backend: Backend,
) -> None:
    sys_ = await system(backend)
    client = sys_.sales.setup_bus.client()
    for n in range(ORDERS):
        await client.send(
            PlaceOrder(order_id=f"o{n}", amount=n), to=sys_.orders, idempotency_key=f"o{n}"
        )
    await sys_.sales.run_until_quiet()  # the orders sent, for the other app to receive

    # Both apps' cleanups at once while the shipping app's messages wait, unclaimed: its
    # cleanup sees them in the shared container, and leaves them to their own app's.
    reports = await cleanups(sys_, "waiting")
    shipping_kept = sum((r.kept() for r in reports[2:]), Counter[str]())
    # The sales app's 2 * ORDERS tokens, once per instance that ran the tokens task.
    assert shipping_kept["other_app"] in (2 * ORDERS, 4 * ORDERS), shipping_kept
    await run_until_quiet(sys_)

    # Everything processed once: every order placed and shipped, every notice received.
    applied = {
        endpoint: await harness.applied(endpoint)
        for harness in sys_.apps
        for endpoint in harness.app.endpoints
    }
    assert {e: len(ids) for e, ids in applied.items()} == {
        sys_.orders: 2 * ORDERS,
        sys_.dispatch: ORDERS,
        sys_.notices: ORDERS,
    }
    assert all(len(set(ids)) == len(ids) for ids in applied.values())

    for round_ in range(3):
        reports += await cleanups(sys_, str(round_))
    kept = sum((r.kept() for r in reports), Counter[str]())
    assert kept["bad_origin"] == 0, kept
    assert await sys_.sales.tokens() == []  # one container for both apps' tokens
    payloads = sys_.sales.raw.blob_container(sys_.sales.config.payloads_container)
    assert [b async for b in payloads.list()] == []
    for harness in sys_.apps:
        for endpoint in harness.app.endpoints:
            assert await harness.outbox_records(endpoint) == []
            assert await harness.applied(endpoint) == applied[endpoint]  # nothing redone

    # Each app's leases and checkpoints in its own table, over its own endpoints only.
    for harness in sys_.apps:
        table = harness.raw.table(cleanup_of(sys_, harness).checkpoint_table)
        tasks = {e.row_key async for e in table.query_all(partition_key=TASK_PARTITION)}
        outbox_tasks = {t.removeprefix("outbox.") for t in tasks if t.startswith("outbox.")}
        assert outbox_tasks == set(harness.app.endpoints)
        poison_tasks = {t.removeprefix("poison.") for t in tasks if t.startswith("poison.")}
        assert poison_tasks == set(harness.app.endpoints)  # its own poison queues only


async def test_each_apps_cleanup_keeps_to_its_own_parked_originals(backend: Backend) -> None:
    """The parked container is shared: an orphan original (no poison message refers to it)
    under one app's endpoint is removed by that app's cleanup only."""
    sys_ = await system(backend)
    parked = sys_.sales.raw.blob_container(sys_.sales.config.parked_container)
    orphan = f"{sys_.dispatch}/{fresh_id()}"
    await parked.create(orphan, b"{}", {})

    await clean(sys_.sales, cleanup_of(sys_, sys_.sales), "sales")
    assert [b.name async for b in parked.list()] == [orphan]

    report = await clean(sys_.shipping, cleanup_of(sys_, sys_.shipping), "shipping")
    assert report.removed()["orphan_parked_originals"] == 1
    assert [b.name async for b in parked.list()] == []
