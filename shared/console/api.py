"""The console's handlers: one request in, one response out, whatever serves them.

``Console.handle`` routes a ``Request`` (``shared.console.http``): the page's files at ``/``,
``/console.js`` and ``/console.css``, and the JSON API under ``/api/`` (docs/console.md lists
it). Every API request is authenticated first (``shared.console.guard``), every action's CSRF
value, origin and content type checked, and every answer carries the security headers
(``shared.console.headers``). Errors are ``{"error": text}`` with a 4xx or 5xx status; a
storage failure is a 503, never a crash of the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from shared.app_loader import APP_SETTING, DEFAULT_APP
from shared.console.guard import Guard, Refused
from shared.console.headers import secured
from shared.console.http import Request, Response, error_response, json_response
from shared.console.overview import overview
from shared.console.static import static_file
from shared.errors import OutcomeUnknown, StorageError
from shared.logsafe import shown
from shared.runtime import Worker

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
"""The largest request body the console reads: an action names at most a few thousand ids."""
OVERVIEW_SECONDS = 5.0
"""How long one overview is served to every tab that asks, before storage is read again."""

Handler = Callable[[Request, str], Awaitable[Response]]


class Console:
    """The console of ``worker``'s app, guarded by ``guard``."""

    def __init__(self, worker: Worker, guard: Guard) -> None:
        self.worker = worker
        self.guard = guard
        self._overview: tuple[float, dict[str, Any]] | None = None
        self._overview_lock = asyncio.Lock()
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/api/session"): self._session,
            ("GET", "/api/overview"): self._overview_answer,
        }

    async def handle(self, request: Request) -> Response:
        try:
            answer = await self._answer(request)
        except Exception:  # a bug or a record nobody expected: one request fails, not the server
            log.exception("console: %s %s failed", request.method, shown(request.path))
            answer = error_response(500, "the console failed on this request (see its log)")
        return secured(answer, request.path)

    async def _answer(self, request: Request) -> Response:
        if not request.path.startswith("/api/"):
            found = static_file(request.path) if request.method == "GET" else None
            return found or error_response(404, "no such page")
        try:
            who = self.guard.identify(request)
            if len(request.body) > MAX_BODY_BYTES:
                return error_response(413, f"a request body holds at most {MAX_BODY_BYTES} bytes")
            handler = self._route(request)
            if request.method == "POST":
                self.guard.check_action(request, who)
            return await handler(request, who)
        except Refused as e:
            return error_response(e.status, str(e))
        except (StorageError, OutcomeUnknown) as e:
            log.warning("console: %s %s failed: %s", request.method, shown(request.path), e)
            return error_response(503, f"storage did not answer as expected: {e}")

    def _route(self, request: Request) -> Handler:
        handler = self._routes.get((request.method, request.path))
        if handler is not None:
            return handler
        if any(path == request.path for _, path in self._routes):
            raise Refused(405, f"{request.method} is not allowed here")
        raise Refused(404, "no such API")

    async def _session(self, request: Request, who: str) -> Response:
        app = self.worker.settings.get(APP_SETTING) or DEFAULT_APP
        return json_response(
            200,
            {
                "who": who,
                "read_only": self.guard.read_only,
                "csrf": self.guard.csrf(who),
                "app": app,
            },
        )

    async def _overview_answer(self, request: Request, who: str) -> Response:
        async with self._overview_lock:  # tabs asking at once share one look at storage
            cached = self._overview
            if cached is None or time.monotonic() - cached[0] > OVERVIEW_SECONDS:
                now = datetime.now(UTC)
                scan = self.worker.app_config.console.audit_scan_rows
                cached = (time.monotonic(), await overview(self.worker, now, scan))
                self._overview = cached
        return json_response(200, cached[1])
