"""The console as an HTTP function of the deployed app (``BUS_CONSOLE_ENABLED``).

``shared.bindings`` binds the route ``console/{*path}`` anonymous to the Functions host: a
function key could not guard it (every host key opens every function-level route, ingress
clients' included, and a browser asks for the page's script and style without the key). Every
API request needs the console's own credential instead, its secret or an Entra ID sign-in,
settled when the function is bound (``shared.console.guard.deployed_identity``: no credential
configured, no console); the page's files hold no data and load without it, to ask for it.
This module turns the host's request into the console's and its answer back. The page is
served at ``/api/console/`` (the host's route prefix), so its requests are relative to that;
the address without the trailing slash is redirected to it, keeping its query.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import azure.functions as func

from shared.bus.parked_body import BodyWithheld
from shared.console.api import Console
from shared.console.csrf_key import shared_csrf_key
from shared.console.guard import Guard, deployed_identity
from shared.console.headers import secured
from shared.console.http import Request, Response, Streamed, error_response, lower_headers
from shared.errors import OutcomeUnknown, StorageError
from shared.runtime import Worker

PATH_PARAMETER = "path"
DEPLOYED_DOWNLOAD_BYTES = 1024 * 1024
"""The largest body the deployed console hands out as a download: it answers whole."""


class DeployedConsole:
    """The console of ``worker``'s app, built on its first request (the CSRF key is read
    from storage then). How it knows its operator is settled here, at start-up: a
    ConfigurationError when no credential of the console's own is configured."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        config = worker.app_config
        self._identify = deployed_identity(config.console, config.platform)
        self._console: Console | None = None
        self._building = asyncio.Lock()

    async def handle(self, request: func.HttpRequest) -> func.HttpResponse:
        url = urlsplit(request.url)
        path = request.route_params.get(PATH_PARAMETER) or ""
        if not path and not url.path.endswith("/"):
            return _redirect(urlunsplit(url._replace(path=url.path + "/")))
        try:
            console = await self._ready()
        except (StorageError, OutcomeUnknown, ValueError) as e:
            refused = error_response(503, f"the console cannot start: {e}")
            return _response(secured(refused, "/api/"))
        answer = await console.handle(
            Request(
                method=request.method.upper(),
                path="/" + path,
                origin=f"{url.scheme}://{url.netloc}",
                query=dict(request.params),
                headers=lower_headers(dict(request.headers)),
                body=request.get_body() or b"",
            )
        )
        if answer.stream is not None:
            answer = secured(await _collected(answer, answer.stream), "/api/")
        return _response(answer)

    async def _ready(self) -> Console:
        async with self._building:
            if self._console is None:
                settings = self.worker.app_config.console
                table = self.worker.account().table(self.worker.config.actions_table)
                guard = Guard(
                    identify=self._identify,
                    csrf_key=await shared_csrf_key(table),
                    read_only=settings.read_only,
                )
                self._console = Console(self.worker, guard)
            return self._console


async def _collected(answer: Response, stream: Streamed) -> Response:
    """A download as one answer: the host's Python worker answers HTTP whole (streaming needs
    its FastAPI extension, which switches every HTTP function of the app to it), so a body
    above ``DEPLOYED_DOWNLOAD_BYTES`` is refused, pointing at what reads it whole."""
    if stream.length > DEPLOYED_DOWNLOAD_BYTES:
        return error_response(
            413,
            f"this body is {stream.length} bytes; the deployed console hands out at most "
            f"{DEPLOYED_DOWNLOAD_BYTES} at once: read it with `bus poison show` or "
            "`bus console` (the local console streams it)",
        )
    try:
        body = b"".join([chunk async for chunk in stream.chunks()])
    except (StorageError, OutcomeUnknown, BodyWithheld) as e:
        return error_response(503, f"the body changed or could not be read while sent: {e}")
    return replace(answer, body=body, stream=None)


def _redirect(location: str) -> func.HttpResponse:
    return func.HttpResponse(status_code=308, headers={"Location": location})


def _response(answer: Response) -> func.HttpResponse:
    return func.HttpResponse(
        answer.body,
        status_code=answer.status,
        headers=answer.headers,
        mimetype=answer.content_type.split(";")[0],
        charset="utf-8",
    )
