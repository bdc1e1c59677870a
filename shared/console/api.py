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
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.app_loader import APP_SETTING, DEFAULT_APP
from shared.bus.discard import MAX_REASON_CHARS
from shared.bus.parked_body import BodyWithheld
from shared.console import failed
from shared.console.actions import discard_selected, journal_of, replay_selected
from shared.console.guard import Guard, Refused
from shared.console.headers import secured
from shared.console.http import Request, Response, Streamed, error_response, json_response
from shared.console.overview import overview
from shared.console.parked import ParkedQueues
from shared.console.sagas import correlation_value, look_up, saga_names
from shared.console.selection import QUEUE_MESSAGE_ID, parse_selection, text_field
from shared.console.static import static_file
from shared.errors import NotFound, OutcomeUnknown, StorageError
from shared.logsafe import shown
from shared.runtime import Worker

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
"""The largest request body the console reads: an action names at most a few thousand ids."""
OVERVIEW_SECONDS = 5.0
"""How long one overview is served to every tab that asks, before storage is read again."""

MESSAGE_PATH = "/api/failed/"
"""``/api/failed/<endpoint>/<queue message id>``: one parked message (its body cut to a
prefix); ``.../body``: its whole body, as a download."""
BODY_PART = "body"

Handler = Callable[[Request, str], Awaitable[Response]]


def number(request: Request, name: str, default: int, low: int, high: int) -> int:
    """The whole number ``name`` of the query, from ``low`` to ``high``."""
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise Refused(400, f"{name} is a whole number from {low} to {high}")
    return int(text)


def json_body(request: Request) -> dict[str, Any]:
    try:
        value = json.loads(request.body)
    except (ValueError, RecursionError):
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise Refused(400, "the body is a JSON object")
    return value


@dataclass(frozen=True)
class SystemPlace:
    """Where a console serving a system (``bus console --system``) stands: its app's name
    and every app's, which its session answer lists for the page's selector."""

    name: str
    apps: tuple[str, ...]


class Console:
    """The console of ``worker``'s app, guarded by ``guard``; ``place``: the app's place in
    the system this console is one of (``shared.console.system``), if any."""

    def __init__(self, worker: Worker, guard: Guard, place: SystemPlace | None = None) -> None:
        self.worker = worker
        self.guard = guard
        self.place = place
        self._overview: tuple[float, dict[str, Any]] | None = None
        self._overview_lock = asyncio.Lock()
        self.parked = ParkedQueues(worker.account(), worker.app_config.console.list_limit)
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/api/session"): self._session,
            ("GET", "/api/overview"): self._overview_answer,
            ("GET", "/api/failed"): self._failed,
            ("GET", "/api/failed/groups"): self._groups,
            ("GET", "/api/actions"): self._actions,
            ("GET", "/api/saga"): self._saga,
            ("POST", "/api/replay"): self._replay,
            ("POST", "/api/discard"): self._discard,
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
            return error_response(e.status, str(e), sign_in=e.sign_in)
        except NotFound as e:
            return error_response(503, f"a resource is missing, run `bus provision`: {e}")
        except (StorageError, OutcomeUnknown) as e:
            log.warning("console: %s %s failed: %s", request.method, shown(request.path), e)
            return error_response(503, f"storage did not answer as expected: {e}")

    def _route(self, request: Request) -> Handler:
        handler = self._routes.get((request.method, request.path))
        if handler is not None:
            return handler
        known = any(path == request.path for _, path in self._routes)
        if not known and not request.path.startswith(MESSAGE_PATH):
            raise Refused(404, "no such API")
        if known or request.method != "GET":
            raise Refused(405, f"{request.method} is not allowed here")
        return self._message

    @property
    def endpoints(self) -> list[str]:
        # Named as the worker names them: its performer carries the app's configured name.
        return self.worker.app.running_endpoints(self.worker.app_config.app_name)

    async def _session(self, request: Request, who: str) -> Response:
        app = self.worker.settings.get(APP_SETTING) or DEFAULT_APP
        answer: dict[str, Any] = {
            "who": who,
            "read_only": self.guard.read_only,
            "csrf": self.guard.csrf(who),
            "app": app,
        }
        if self.place is not None:
            answer["system"] = {"app": self.place.name, "apps": list(self.place.apps)}
        return json_response(200, answer)

    async def _overview_answer(self, request: Request, who: str) -> Response:
        async with self._overview_lock:  # tabs asking at once share one look at storage
            cached = self._overview
            if cached is None or time.monotonic() - cached[0] > OVERVIEW_SECONDS:
                now = datetime.now(UTC)
                scan = self.worker.app_config.console.audit_scan_rows
                cached = (time.monotonic(), await overview(self.worker, now, scan))
                self._overview = cached
        return json_response(200, cached[1])

    async def _failed(self, request: Request, who: str) -> Response:
        size = number(request, "size", failed.DEFAULT_PAGE, 1, failed.MAX_PAGE)
        skip = number(request, "skip", 0, 0, 10**9)
        endpoint = request.query.get("endpoint")
        if endpoint is not None and endpoint not in self.endpoints:
            raise Refused(404, "no such endpoint in this app")
        found = await failed.every_entry(
            self.parked, [endpoint] if endpoint else self.endpoints, fresh=skip == 0
        )
        chosen = failed.matching(
            found.entries, request.query.get("type"), request.query.get("error")
        )
        return json_response(
            200,
            {
                "total": len(chosen),
                "complete": found.complete,
                "skip": skip,
                "size": size,
                "messages": [failed.listed_message(e) for e in chosen[skip : skip + size]],
            },
        )

    async def _groups(self, request: Request, who: str) -> Response:
        found = await failed.every_entry(self.parked, self.endpoints, fresh=True)
        return json_response(
            200, {"groups": failed.groups(found.entries), "complete": found.complete}
        )

    async def _message(self, request: Request, who: str) -> Response:
        named, _, part = request.path.removeprefix(MESSAGE_PATH).partition("/")
        queue_message_id, _, what = part.partition("/")
        if (
            named not in self.endpoints
            or not QUEUE_MESSAGE_ID.fullmatch(queue_message_id)
            or what not in ("", BODY_PART)
        ):
            raise Refused(404, "no such parked message")
        if what == BODY_PART:
            return await self._body(named, queue_message_id)
        found = await failed.parked_message(self.worker, self.parked, named, queue_message_id)
        if found is None:
            raise Refused(404, "no such parked message (replayed or discarded since?)")
        return json_response(200, found)

    async def _body(self, endpoint: str, queue_message_id: str) -> Response:
        """The whole body, as a file to save: never shown by the browser (an attachment of
        an opaque type, and ``nosniff`` on every answer)."""
        try:
            body = await failed.parked_body(self.worker, self.parked, endpoint, queue_message_id)
        except BodyWithheld as e:
            raise Refused(409, f"its body is not served: {e.state}: {e}") from None
        if body is None:
            raise Refused(404, "no such parked message (replayed or discarded since?)")
        name = f"{endpoint}-{queue_message_id}.json"
        disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
        download = Streamed(body.size, body.chunks)
        return Response(200, b"", "application/octet-stream", disposition, download)

    async def _replay(self, request: Request, who: str) -> Response:
        selection = parse_selection(json_body(request), self.endpoints)
        done = await replay_selected(self.worker, self.parked, selection, who)
        return json_response(
            200,
            {
                "action": done.action.id,
                "replayed": done.replayed,
                "skipped": len(done.skipped),
                "skipped_why": done.skipped,
                "complete": done.complete,
            },
        )

    async def _discard(self, request: Request, who: str) -> Response:
        body = json_body(request)
        reason = text_field(body, "reason", limit=MAX_REASON_CHARS)
        selection = parse_selection(body, self.endpoints, extra=("reason",))
        done = await discard_selected(self.worker, self.parked, selection, who, reason)
        return json_response(
            200,
            {"action": done.action.id, "discarded": done.discarded, "complete": done.complete},
        )

    async def _saga(self, request: Request, who: str) -> Response:
        """One saga instance by its correlation value (``shared.console.sagas``)."""
        endpoint = request.query.get("endpoint")
        sagas = saga_names(self.worker, self.endpoints)
        if endpoint is None or endpoint not in sagas:
            raise Refused(404, "no such saga in this app")
        value = correlation_value(request.query.get("instance"))
        return json_response(200, await look_up(self.worker, endpoint, value, sagas))

    async def _actions(self, request: Request, who: str) -> Response:
        size = number(request, "size", 50, 1, 500)
        skip = number(request, "skip", 0, 0, 10**9)
        total, actions = await journal_of(self.worker).page(skip, size)
        return json_response(
            200, {"total": total, "actions": [action.as_json() for action in actions]}
        )
