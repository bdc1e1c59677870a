"""HTTP triggers on localhost: routing under ``/api``, function-level keys, and conversion
between aiohttp and ``azure.functions`` request/response objects.

Keys work as on the Functions host: a ``function`` route needs the function key or the
master key, sent as the ``x-functions-key`` header or the ``code`` query parameter; an
``admin`` route needs the master key; ``anonymous`` needs none. Paths are matched without
regard to case, ``/api`` included, as on Azure.

Bodies are read with two bounds: at most ``max_request_bytes`` (a larger Content-Length is
refused with 413 before anything is read, a streamed body as soon as it passes the limit) and
within ``BODY_READ_SECONDS`` (408 otherwise), so a client can hold neither memory nor a
connection. Each request's headers must arrive within ``HEADERS_SECONDS``, counted from
accept for the first and from the end of the previous answer for the next (an idle kept-alive
connection is closed the same way); an answer of 401, 404 or 405 closes the connection; and at
most ``max_connections`` connections are open at once (more are answered 503 and closed).
Every error the host itself answers is JSON: ``{"error": "..."}``.

The access log names method, path (never the query string, which may carry ``?code=``, the
function key), status, size and time, each outside value escaped by ``shared.logsafe``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import azure.functions as func
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_protocol import RequestPayloadError

from lab.host.functions import HttpFunction, invoke
from shared.errors import ConfigurationError
from shared.logsafe import shown

log = logging.getLogger(__name__)

ROUTE_PREFIX = "api"
MAX_REQUEST_BYTES = 100 * 1024 * 1024
"""The Functions host's own request size limit (100 MB); functions set tighter ones."""
BODY_READ_SECONDS = 5.0
"""How long a request body may take to arrive once its headers are in."""
HEADERS_SECONDS = 5.0
"""How long a connection may take to send a request's headers: from accept for its first
request, from the end of the previous answer for each next one (idle keep-alive included)."""
MAX_CONNECTIONS = 256
"""Connections open at once by default; one more is answered 503 and closed."""
CLOSING_STATUSES = frozenset({401, 404, 405})
"""Answers after which the connection is closed: a client that guesses keys or paths gets a
new connection (and a new header timer) for every guess, not a connection to keep."""
_PREFIX = re.compile(rf"/{ROUTE_PREFIX}/", re.IGNORECASE)
_PARAMETER = re.compile(r"\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(?::[^}?]*)?(\??)\}")


def joined_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """One value per header name, a repeated header's values joined by ``", "``: what a
    function on Azure receives (its front end folds repeats into one comma-separated value,
    as HTTP allows), so a function sees here what it would see there. Taking one of the
    values instead would hide the repeat from the function."""
    joined: dict[str, str] = {}
    names: dict[str, str] = {}
    for name, value in headers.items():
        first = names.setdefault(name.lower(), name)
        joined[first] = f"{joined[first]}, {value}" if first in joined else value
    return joined


@dataclass(frozen=True)
class Keys:
    function: str
    master: str

    def allows(self, level: str, given: str | None) -> bool:
        if level == "anonymous":
            return True
        if given is None:
            return False
        accepted = [self.master] if level == "admin" else [self.function, self.master]
        # surrogateescape: header bytes that are not UTF-8 arrive as lone surrogates; they
        # must compare unequal, not fail to encode.
        offered = given.encode("utf-8", "surrogateescape")
        return any(hmac.compare_digest(offered, key.encode()) for key in accepted)


@dataclass(frozen=True)
class Route:
    function: HttpFunction
    pattern: re.Pattern[str]

    @classmethod
    def compile(cls, function: HttpFunction) -> Route:
        """``orders/{id}``, ``{id:int}`` (constraints are not checked), ``{id?}`` (optional,
        last segment) and ``{*rest}`` (the remaining path) as in Functions route templates."""
        regex, position = "", 0
        template = function.route
        for match in _PARAMETER.finditer(template):
            literal = template[position : match.start()]
            catch_all, name, optional = match.group(1), match.group(2), match.group(3)
            part = f"(?P<{name}>.*)" if catch_all else f"(?P<{name}>[^/]+)"
            if optional and literal.endswith("/"):
                regex += re.escape(literal[:-1]) + f"(?:/{part})?"
            else:
                regex += re.escape(literal) + (f"{part}?" if optional else part)
            position = match.end()
        regex += re.escape(template[position:])
        try:
            return cls(function, re.compile(f"^{regex}$", re.IGNORECASE))
        except re.error as e:
            raise ConfigurationError(f"function {function.name}: bad route {template!r}") from e

    def match(self, path: str) -> dict[str, str] | None:
        found = self.pattern.match(path)
        if found is None:
            return None
        return {k: v for k, v in found.groupdict().items() if v is not None}


class BodyRefused(Exception):
    """The request body was not read whole: too large or too slow (status and reason)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def read_body(request: web.BaseRequest, limit: int, seconds: float) -> bytes:
    """The whole body, or BodyRefused as soon as it is known to exceed ``limit`` bytes or
    to take longer than ``seconds``: nothing past the limit is ever buffered."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyRefused(413, f"request body is {declared} bytes; this host accepts {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > limit:
                    raise BodyRefused(413, f"request body passed {limit} bytes, this host's limit")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyRefused(
            408, f"the request body did not arrive within {seconds:g} seconds"
        ) from None
    except RequestPayloadError as e:
        # Malformed chunking or a Content-Encoding the body does not match.
        raise BodyRefused(400, f"the request body cannot be read: {e}") from None
    return b"".join(chunks)


class HttpFrontEnd:
    """A low-level aiohttp server serving every HTTP function of the app."""

    def __init__(
        self,
        functions: list[HttpFunction],
        keys: Keys,
        function_timeout: float,
        *,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.routes = [Route.compile(f) for f in functions]
        self.keys = keys
        self.function_timeout = function_timeout
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections

    def runner(self, shutdown_timeout: float) -> web.ServerRunner:
        server = JsonErrorServer(self.dispatch, max_connections=self.max_connections)
        return web.ServerRunner(server, shutdown_timeout=shutdown_timeout)

    async def dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        if isinstance(request.protocol, JsonErrorHandler):
            request.protocol.headers_arrived()
        response = await self._dispatch(request)
        if response.status in CLOSING_STATUSES:
            response.force_close()
        return response

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        prefix = _PREFIX.match(request.path)
        if prefix is None:
            return error_response(404, "not found")
        path = request.path[prefix.end() :].strip("/")
        matched = [(r, p) for r in self.routes if (p := r.match(path)) is not None]
        if not matched:
            return error_response(404, f"no function serves /{ROUTE_PREFIX}/{path}")
        allowed = [(r, p) for r, p in matched if request.method in r.function.methods]
        if not allowed:
            methods = sorted({m for r, _ in matched for m in r.function.methods})
            response = error_response(405, f"{request.method} is not allowed here")
            response.headers["Allow"] = ", ".join(methods)
            return response
        route, params = allowed[0]
        given = request.headers.get("x-functions-key") or request.query.get("code")
        if not self.keys.allows(route.function.auth_level, given):
            return error_response(
                401, "a valid function key is required (x-functions-key or ?code=)"
            )
        try:
            body = await read_body(request, self.max_request_bytes, BODY_READ_SECONDS)
        except BodyRefused as e:
            response = error_response(e.status, str(e))
            response.force_close()  # the rest of the body is not read: the connection is spent
            return response
        http_request = func.HttpRequest(
            request.method,
            str(request.url),
            headers=joined_headers(request.headers),
            params=dict(request.query),
            route_params=params,
            body=body,
        )
        try:
            response = await invoke(
                route.function.function,
                route.function.arg_name,
                http_request,
                self.function_timeout,
            )
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            # Whatever ended the invocation (a simulated crash included), the client gets a
            # 500 and may retry; the listener keeps serving other requests.
            log.exception("function %s failed", route.function.name)
            return error_response(500, "internal server error")
        return to_aiohttp(response)


def to_aiohttp(response: object) -> web.Response:
    """A function may return an HttpResponse, a string, or None (204), as in the worker."""
    if response is None:
        return web.Response(status=204)
    if isinstance(response, str | bytes):
        return web.Response(body=response.encode() if isinstance(response, str) else response)
    if not isinstance(response, func.HttpResponse):
        raise ConfigurationError(f"an HTTP function returned {type(response).__name__}")
    headers: Mapping[str, str] = dict(response.headers)
    content_type = response.mimetype or "text/plain"
    if response.charset:
        content_type += f"; charset={response.charset}"
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    return web.Response(
        status=response.status_code,
        body=response.get_body(),
        headers={**headers, "Content-Type": content_type},
    )


def error_response(status: int, message: str) -> web.Response:
    """The host's own error answers, in the JSON form the API documents."""
    return web.json_response({"error": message}, status=status)


def complaint(error: object) -> str:
    """What aiohttp's parser says is wrong, without the bytes it quotes after a blank line:
    they are the client's request line or header, ``?code=`` (the function key) included."""
    description = str(error).split("\n\n", 1)[0]
    return shown(" ".join(part.strip() for part in description.splitlines()).rstrip(":"), 200)


class AccessLog(AbstractAccessLogger):
    """One line per answered request: method, path without the query string (``?code=`` is
    a key), status, size and seconds; the method and path escaped, as a client wrote them."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s %s %d %d %.3fs",
            request.remote or "-",
            shown(request.method, 20),
            shown(request.rel_url.raw_path, 200),
            response.status,
            response.body_length,
            time,
        )


class JsonErrorHandler(web.RequestHandler):
    """aiohttp's connection handler, answering the errors it raises itself (a malformed
    request line or header, an error outside any function) in the host's JSON error form,
    closing a connection whose next request's headers do not arrive in time, and refusing a
    connection over the server's cap."""

    _headers_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self._manager
        if isinstance(server, JsonErrorServer) and server.over_capacity():
            server.refused_one()
            body = b'{"error": "too many connections; try again later"}'
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
            self.force_close()
            transport.close()
            return
        # aiohttp bounds idle time only between requests of a kept-alive connection, by
        # its keep-alive timer: one that never completes a request's headers is bounded here.
        self._arm_headers_timer()

    def _arm_headers_timer(self) -> None:
        self.headers_arrived()
        self._headers_due = asyncio.get_running_loop().call_later(
            HEADERS_SECONDS, self._headers_overdue
        )

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        answered = await super().finish_response(request, resp, start_time)
        # The answer is out: the next request's headers are due within HEADERS_SECONDS,
        # like the first one's (a pipelined request already in cancels this at dispatch).
        if self.transport is not None and not self._force_close and not self._close:
            self._arm_headers_timer()
        return answered

    def headers_arrived(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.headers_arrived()
        super().connection_lost(exc)

    def _headers_overdue(self) -> None:
        self._headers_due = None
        log.info("closing a connection that sent no whole request within %gs", HEADERS_SECONDS)
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("a response has begun; the error cannot be answered")
        if status >= HTTPStatus.INTERNAL_SERVER_ERROR:
            self.log_exception("error handling a request from %s", request.remote, exc_info=exc)
        else:
            # The client's fault: one line, so that garbage cannot flood the log with traces.
            log.info("malformed request from %s: %s", request.remote, complaint(message or exc))
        text = message if message and status < HTTPStatus.INTERNAL_SERVER_ERROR else None
        response = error_response(status, text or HTTPStatus(status).phrase.lower())
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    """The low-level aiohttp server with ``JsonErrorHandler`` for every connection, at most
    ``max_connections`` of them open at once."""

    def __init__(
        self, handler: Any, *, max_connections: int = MAX_CONNECTIONS, **kwargs: Any
    ) -> None:
        if max_connections < 1:
            raise ConfigurationError("the connection cap must be at least 1")
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.refused = 0
        self._refusal_logged = -1.0

    def over_capacity(self) -> bool:
        """Whether the connection just made is one too many (it is already counted)."""
        return len(self.connections) > self.max_connections

    def refused_one(self) -> None:
        self.refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._refusal_logged >= 10.0:  # one line per 10 s, however many
            self._refusal_logged = now
            log.warning(
                "refusing connections over the cap of %d (%d refused so far)",
                self.max_connections,
                self.refused,
            )

    def __call__(self) -> web.RequestHandler:
        # lingering_time=0: a body left unread (refused as too large or too slow) is not
        # drained after the answer; the connection is closed instead. keepalive_timeout:
        # aiohttp's own idle bound (an hour by default), as short as the header timer.
        return JsonErrorHandler(
            self,
            loop=asyncio.get_running_loop(),
            lingering_time=0,
            keepalive_timeout=HEADERS_SECONDS,
            access_log_class=AccessLog,
        )
