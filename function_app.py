"""Azure Functions bindings. Declarations only: each function converts its trigger and calls
one library function in ``shared/``, where all logic lives and is tested without the host.

Queue names must match infra/resources.json (a test checks it), since the Bicep templates
provision exactly those queues.
"""

from __future__ import annotations

import azure.functions as func

from shared import runtime

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
STORAGE = "AzureWebJobsStorage"


@app.queue_trigger(arg_name="msg", queue_name="shootingrange", connection=STORAGE)
async def shootingrange(msg: func.QueueMessage) -> None:
    await runtime.receive("shootingrange", msg.get_body(), msg.dequeue_count or 1)


@app.queue_trigger(arg_name="msg", queue_name="leaderboard", connection=STORAGE)
async def leaderboard(msg: func.QueueMessage) -> None:
    await runtime.receive("leaderboard", msg.get_body(), msg.dequeue_count or 1)


@app.queue_trigger(arg_name="msg", queue_name="orders", connection=STORAGE)
async def orders(msg: func.QueueMessage) -> None:
    await runtime.receive("orders", msg.get_body(), msg.dequeue_count or 1)


@app.queue_trigger(arg_name="msg", queue_name="payments", connection=STORAGE)
async def payments(msg: func.QueueMessage) -> None:
    await runtime.receive("payments", msg.get_body(), msg.dequeue_count or 1)


@app.queue_trigger(arg_name="msg", queue_name="shipping", connection=STORAGE)
async def shipping(msg: func.QueueMessage) -> None:
    await runtime.receive("shipping", msg.get_body(), msg.dequeue_count or 1)


@app.queue_trigger(arg_name="msg", queue_name="loyalty", connection=STORAGE)
async def loyalty(msg: func.QueueMessage) -> None:
    await runtime.receive("loyalty", msg.get_body(), msg.dequeue_count or 1)


@app.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
async def health(req: func.HttpRequest) -> func.HttpResponse:
    status, body = await runtime.health()
    return func.HttpResponse(body, status_code=status, mimetype="application/json")


@app.route(route="messages", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
async def ingress(req: func.HttpRequest) -> func.HttpResponse:
    status, body = await runtime.ingress(req.headers, req.get_body())
    return func.HttpResponse(body, status_code=status, mimetype="application/json")


@app.timer_trigger(arg_name="timer", schedule="%CLEANUP_SCHEDULE%", use_monitor=False)
async def cleanup(timer: func.TimerRequest) -> None:
    await runtime.cleanup_now()
