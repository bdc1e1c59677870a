"""The app's own HTTP routes, declared on the ``BusApp`` beside its endpoints.

``@app.route("orders", methods=["POST"])`` on ``async def accept(request, bus)`` declares a
web route: the blueprint binds it as an HTTP function (``POST /api/orders``, function key
required, ``shared.bindings``), the local host serves it as it serves the ingress, and a test
calls it without either (``shared.web.serve``). The handler receives the project's own
request (``shared.web.WebRequest``) and the running ``Bus``, and answers a
``shared.web.WebResponse``; nothing of ``azure.functions`` reaches it, so the same handler
can be mounted in another web framework.

The declaration is checked here, once: a function name the host accepts, a route template of
plain segments and ``{name}`` parameters, known methods and a body bound. Whether a name or
path clashes with the bus's own functions is judged where they are bound.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from shared.errors import ConfigurationError

RouteHandler = Callable[[Any, Any], Awaitable[Any]]
"""``async def handler(request: WebRequest, bus: Bus) -> WebResponse`` (``shared.web``; the
types live above this layer, which only keeps the declaration)."""

METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
DEFAULT_MAX_BODY_BYTES = 64 * 1024
"""A route's request body bound unless it declares its own: room for a form or a JSON
document, none for a client that would make the worker hold megabytes."""
MAX_BODY_BYTES = 100 * 1024 * 1024
"""The Functions host's own request limit: no route can take more."""
FUNCTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,127}")
"""What the Functions host accepts as a function name."""
_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+|\{[A-Za-z_][A-Za-z0-9_]*\}")


@dataclass(frozen=True)
class HttpRoute:
    """One declared route: its function name, path under ``/api``, methods, body bound and
    handler."""

    name: str
    path: str
    methods: tuple[str, ...]
    handler: RouteHandler
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def declared(
        cls,
        name: str,
        path: str,
        methods: Collection[str],
        handler: RouteHandler,
        max_body_bytes: int,
    ) -> HttpRoute:
        """The route, or a ConfigurationError naming what is wrong with it."""
        if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
            raise ConfigurationError(
                f"route function name {name!r}: a letter, then up to 127 letters, digits, "
                "'_' or '-' (it names the HTTP function)"
            )
        return cls(
            name, check_path(path), _methods(name, methods), handler, _bound(name, max_body_bytes)
        )

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of the route's ``{name}`` segments."""
        return tuple(s[1:-1] for s in self.path.split("/") if s.startswith("{"))


def check_path(path: str) -> str:
    """A route template under ``/api``: segments of letters, digits and ``._~-``, or a
    ``{name}`` parameter each, without a leading or trailing ``/``."""
    segments = path.split("/") if isinstance(path, str) else [""]
    if not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ConfigurationError(
            f"route {path!r}: segments of letters, digits and '._~-' or '{{name}}' parameters, "
            "separated by '/' (the path under /api, without a leading '/')"
        )
    return path


def _methods(name: str, methods: Collection[str]) -> tuple[str, ...]:
    chosen = tuple(sorted({str(m).upper() for m in methods}))
    unknown = sorted(set(chosen) - METHODS)
    if not chosen or unknown:
        raise ConfigurationError(
            f"route {name}: methods {unknown or '(none)'}; choose among {sorted(METHODS)}"
        )
    return chosen


def _bound(name: str, max_body_bytes: int) -> int:
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int):
        raise ConfigurationError(f"route {name}: max_body_bytes must be a number of bytes")
    if not 0 <= max_body_bytes <= MAX_BODY_BYTES:
        raise ConfigurationError(
            f"route {name}: max_body_bytes {max_body_bytes:,} is outside 0-{MAX_BODY_BYTES:,} "
            "(the Functions host's own limit)"
        )
    return max_body_bytes
