"""A session in any Python web framework: a small Starlette app served by a real uvicorn
server on a local port, its POST handler running ``bus.session(...)`` on Azurite, driven over
real HTTP. A committed request's message is processed once, its retry under the same key adds
nothing, and a request whose handler raises writes and sends nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import uvicorn
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shared.bus import Bus, BusApp, Command
from shared.errors import SessionConflict
from shared.stores.table import Entity
from tests.bus.harness import Harness, per_mode_backend
from tests.conftest import Backend, unique_name

__all__ = ["per_mode_backend"]

pytestmark = pytest.mark.parametrize(
    "backend",
    [pytest.param(("azurite", "token"), id="azurite", marks=pytest.mark.azurite)],
    indirect=True,
)


class PlaceOrder(Command):
    partition_by = "order_id"
    order_id: str


class Taken(BaseModel):
    orders: list[str] = []


def build_app() -> BusApp:
    app = BusApp()
    app.endpoint("shop", sessions=True)
    orders = app.endpoint("orders", Taken)

    @orders.handles(PlaceOrder)
    def take(ctx, message: PlaceOrder) -> None:  # type: ignore[no-untyped-def]
        ctx.state.orders.append(message.order_id)

    return app


def web_app(bus: Bus) -> Starlette:
    """What a team's own web app looks like: its handler opens a session of the bus."""

    async def place_order(request: Request) -> JSONResponse:
        body = await request.json()
        order_id = str(body["order_id"])
        key = request.headers.get("Idempotency-Key")
        try:
            async with bus.session("shop", partition=order_id, key=key) as s:
                if not s.deduplicated:
                    s.insert(Entity(order_id, "order", {"customer": str(body["customer"])}))
                    s.send(PlaceOrder(order_id=order_id), to="orders")
                    if body.get("fail"):
                        raise RuntimeError("the request failed after its writes")
        except SessionConflict as e:
            return JSONResponse({"error": str(e)}, status_code=409)
        answer = {"message_ids": list(s.message_ids), "deduplicated": s.deduplicated}
        return JSONResponse(answer, status_code=200 if s.deduplicated else 202)

    return Starlette(routes=[Route("/orders", place_order, methods=["POST"])])


@contextlib.asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free local port, in this test's event loop; its base URL."""
    config = uvicorn.Config(app, port=0, http="h11", lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def harness(backend: Backend) -> Harness:
    return await Harness.create(backend, build_app())


async def post(base: str, body: dict[str, Any], key: str) -> tuple[int, Any]:
    """Status and body (JSON, or the text of Starlette's own 500)."""
    async with (
        aiohttp.ClientSession() as client,
        client.post(f"{base}/orders", json=body, headers={"Idempotency-Key": key}) as response,
    ):
        if response.content_type != "application/json":
            return response.status, await response.text()
        return response.status, await response.json()


async def taken(harness: Harness, order_id: str) -> list[str]:
    return (await harness.applied_state("orders", order_id, Taken)).orders


async def order_rows(harness: Harness, order_id: str) -> dict[str, Entity]:
    return await harness.rows("shop").rows().read(order_id, ["order"])


async def test_a_committed_request_is_processed_once_and_its_retry_adds_nothing(
    harness: Harness,
) -> None:
    order = unique_name("o")
    async with served(web_app(harness.bus)) as base:
        status, first = await post(base, {"order_id": order, "customer": "ada"}, key=order)
        assert (status, first["deduplicated"], len(first["message_ids"])) == (202, False, 1)
        status, again = await post(base, {"order_id": order, "customer": "ada"}, key=order)
        assert (status, again) == (200, {**first, "deduplicated": True})
        status, other = await post(base, {"order_id": order, "customer": "bo"}, key="other")
        assert status == 409, other  # its row exists: nothing of it is written or sent
    await harness.run_until_quiet()
    assert await taken(harness, order) == [order]
    assert (await order_rows(harness, order))["order"]["customer"] == "ada"


async def test_a_request_whose_handler_raises_writes_and_sends_nothing(harness: Harness) -> None:
    order = unique_name("o")
    async with served(web_app(harness.bus)) as base:
        body = {"order_id": order, "customer": "ada", "fail": True}
        assert await post(base, body, key=order) == (500, "Internal Server Error")
    await harness.run_until_quiet()
    assert await taken(harness, order) == []
    assert await order_rows(harness, order) == {}
    assert await harness.tokens() == []
