"""Azure Functions bindings. Declarations only: each function converts its trigger and calls
one library function in ``shared/``, where all logic lives and is tested without the host."""

from __future__ import annotations

import azure.functions as func

from shared import runtime

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)


@app.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
async def health(req: func.HttpRequest) -> func.HttpResponse:
    status, body = await runtime.health()
    return func.HttpResponse(body, status_code=status, mimetype="application/json")
