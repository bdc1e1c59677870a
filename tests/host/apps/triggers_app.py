"""A function app with one trigger of each kind, for the local host tests. Functions record
what they receive in ``seen``."""

from __future__ import annotations

import json

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
seen: list[tuple[str, object]] = []


@app.queue_trigger(arg_name="msg", queue_name="%TEST_QUEUE%", connection="AzureWebJobsStorage")
async def on_queue(msg: func.QueueMessage) -> None:
    seen.append(("queue", (msg.get_body().decode(), msg.dequeue_count)))


@app.timer_trigger(arg_name="timer", schedule="%TEST_SCHEDULE%", run_on_startup=True)
def on_timer(timer: func.TimerRequest) -> None:  # sync on purpose: runs on a worker thread
    seen.append(("timer", timer.past_due))


@app.route(route="echo/{name}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def echo(req: func.HttpRequest) -> func.HttpResponse:
    body = {"name": req.route_params["name"], "q": req.params.get("q")}
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


@app.route(route="items/{id?}", methods=["POST", "PUT"])
async def items(req: func.HttpRequest) -> func.HttpResponse:
    item = req.route_params.get("id", "none")
    return func.HttpResponse(f"{req.method} {item} {req.get_body().decode()}", status_code=201)


@app.route(route="admin/reset", methods=["POST"], auth_level=func.AuthLevel.ADMIN)
async def reset(req: func.HttpRequest) -> None:
    seen.clear()


@app.route(route="broken")
async def broken(req: func.HttpRequest) -> func.HttpResponse:
    raise RuntimeError("bug in the function")
