"""HTTP triggers on localhost: routing under ``/api``, function-level keys, and conversion
between aiohttp and ``azure.functions`` request/response objects.

Keys work as on the Functions host: a ``function`` route needs the function key or the
master key, sent as the ``x-functions-key`` header or the ``code`` query parameter; an
``admin`` route needs the master key; ``anonymous`` needs none.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import azure.functions as func
from aiohttp import web

from shared.errors import ConfigurationError
from shared.host.functions import HttpFunction, invoke

log = logging.getLogger(__name__)

ROUTE_PREFIX = "api"
MAX_REQUEST_BYTES = 100 * 1024 * 1024
"""The Functions host's own request size limit (100 MB); functions set tighter ones."""
_PARAMETER = re.compile(r"\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(?::[^}?]*)?(\??)\}")


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
        return any(hmac.compare_digest(given.encode(), key.encode()) for key in accepted)


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


class HttpFrontEnd:
    """An aiohttp application serving every HTTP function of the app."""

    def __init__(self, functions: list[HttpFunction], keys: Keys, function_timeout: float):
        self.routes = [Route.compile(f) for f in functions]
        self.keys = keys
        self.function_timeout = function_timeout
        self.app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        prefix = f"/{ROUTE_PREFIX}/"
        if not request.path.startswith(prefix):
            return _text(404, "not found")
        path = request.path[len(prefix) :].strip("/")
        matched = [(r, p) for r in self.routes if (p := r.match(path)) is not None]
        if not matched:
            return _text(404, f"no function serves /{ROUTE_PREFIX}/{path}")
        allowed = [(r, p) for r, p in matched if request.method in r.function.methods]
        if not allowed:
            methods = sorted({m for r, _ in matched for m in r.function.methods})
            return web.Response(status=405, headers={"Allow": ", ".join(methods)})
        route, params = allowed[0]
        given = request.headers.get("x-functions-key") or request.query.get("code")
        if not self.keys.allows(route.function.auth_level, given):
            return _text(401, "a valid function key is required (x-functions-key or ?code=)")
        http_request = func.HttpRequest(
            request.method,
            str(request.url),
            headers=dict(request.headers),
            params=dict(request.query),
            route_params=params,
            body=await request.read(),
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
            return _text(500, "internal server error")
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


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message)
