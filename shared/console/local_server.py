"""``bus console``'s server: the console's handlers on aiohttp, on the operator's machine.

It listens on a loopback address by default, prints the one line that opens the page (its
address with a token new at each start), and serves until interrupted. No access log is
written: the page's first address holds the token. On a loopback address it answers only
requests addressed to it by that name (the ``Host`` header), so a site whose name an attacker
points at 127.0.0.1 cannot reach it from a browser either.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from shared.console.api import MAX_BODY_BYTES
from shared.console.headers import secured
from shared.console.http import Request, Response, Streamed, error_response, lower_headers

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class Served(Protocol):
    """What the server serves: one app's console, or a system's (``shared.console.system``)."""

    async def handle(self, request: Request) -> Response: ...


def new_token() -> str:
    """A random, URL-safe token: new at each start of ``bus console``."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Listening:
    host: str
    port: int

    def address(self, token: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={token}"


async def serve(console: Served, host: str, port: int, token: str) -> None:
    """Serve ``console`` on ``host``:``port`` (0: a free port) until SIGINT or SIGTERM,
    printing ``console: ADDRESS`` on stdout once it listens."""
    server = web.Server(_handler(console, host), access_log=None)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = Listening(host, int(runner.addresses[0][1]))
        print(f"console: {bound.address(token)}", flush=True)
        await _until_stopped()
    finally:
        await runner.cleanup()


async def _until_stopped() -> None:
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    try:
        await stopped.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    print("console: stopped", file=sys.stderr)


def _handler(
    console: Served, host: str
) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """Every request, whatever its path, to the console: no router in between, so no path
    is answered by anything else."""
    check_host = _is_loopback(host)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if check_host and not _loopback_host(request.host):
            refused = error_response(421, "this console answers to its loopback address only")
            answer = secured(refused, request.path)
        else:
            answer = await console.handle(await _request(request))
        if answer.stream is not None:
            return await _streamed(request, answer, answer.stream)
        return _response(answer)

    return handle


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_host(value: str) -> bool:
    """``value`` (a Host header) names a loopback address, with or without a port."""
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name, port = name + "]", rest.removeprefix(":")
    else:
        name, _, port = value.partition(":")
    return name.lower() in LOOPBACK_NAMES and (not port or port.isdigit())


async def _request(request: web.BaseRequest) -> Request:
    body = b""
    if request.can_read_body:
        body = await request.content.read(MAX_BODY_BYTES + 1)
        while len(body) <= MAX_BODY_BYTES and not request.content.at_eof():
            more = await request.content.read(MAX_BODY_BYTES + 1 - len(body))
            if not more:
                break
            body += more
    return Request(
        method=request.method,
        path=request.path,
        origin=f"http://{request.host}",
        query={k: request.query[k] for k in request.query},
        headers=lower_headers(dict(request.headers)),
        body=body,
    )


async def _streamed(
    request: web.BaseRequest, answer: Response, stream: Streamed
) -> web.StreamResponse:
    """A download written chunk by chunk as it is read, its length announced: one that fails
    half-way (the blob changed since it was checked) is cut short, which the browser reports
    as a failed download, never as a whole file."""
    response = web.StreamResponse(status=answer.status, headers=answer.headers)
    response.content_type = answer.content_type.split(";")[0]
    response.content_length = stream.length
    await response.prepare(request)
    async for chunk in stream.chunks():
        await response.write(chunk)
    await response.write_eof()
    return response


def _response(answer: Response) -> web.Response:
    response = web.Response(status=answer.status, body=answer.body, headers=answer.headers)
    response.content_type = answer.content_type.split(";")[0]
    if "charset=" in answer.content_type:
        response.charset = answer.content_type.split("charset=")[1]
    return response
