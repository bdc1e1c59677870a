"""The product's performer for an app with an at-most-once service: the runtime gives it the
markers of its own table, so a call whose answer never comes is answered ``uncertain`` and
never made again, through a real HTTP server."""

from __future__ import annotations

import asyncio

from shared.bus import BusApp, HandlerContext
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.effects.markers import performer_markers
from shared.provisioning import provision
from tests.effects.http_servers import KeyedProvider, serving
from tests.effects.test_performer import Order, PlaceOrder
from tests.effects.test_wiring import RefundAnswered, drain, worker


def keyless_shop() -> BusApp:
    app = BusApp()
    orders = app.endpoint("orders", Order)

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        ctx.state.requested.append(
            ctx.request_effect(
                service="legacy-payments",
                operation="refund",
                body={"amount": cmd.amount},
                answer=RefundAnswered,
            )
        )

    @orders.handles(RefundAnswered)
    def answered(ctx: HandlerContext[Order], answer: RefundAnswered) -> None:
        ctx.state.answers.append((answer.key, answer.outcome))

    app.service(
        "legacy-payments",
        operations={"refund": "/refunds"},
        at_most_once=True,
        timeout_seconds=0.5,
    )
    return app


async def test_a_late_answer_is_uncertain_and_the_call_is_never_made_again() -> None:
    app = keyless_shop()
    async with serving(KeyedProvider(answer_after=2.0)) as server:
        built = worker(app, BUS_SERVICE_LEGACY_PAYMENTS_URL=server.url)
        await provision(built.account(), built.resources)
        client = built.bus().client()
        await client.send(PlaceOrder(order="o1", amount=700), to="orders", idempotency_key="o1")
        async with asyncio.timeout(30):
            await drain(built)
        await built.close()

    assert len(server.received) == 1  # the one call, never repeated after its timeout
    states = [row async for row in built.bus().endpoint_state("orders").states()]
    [order] = [Order.model_validate_json(row.data) for row in states if row.partition_key == "o1"]
    [key] = order.requested
    assert order.answers == [(key, "uncertain")]
    assert await performer_markers(built.account()).marked(key)
    assert PERFORMER_ENDPOINT in built.app.endpoints
