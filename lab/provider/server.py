"""The provider over HTTP (aiohttp.web): ``POST /v1/charges`` and ``POST /v1/refunds`` under
an ``Idempotency-Key``, ``GET /ledger``, and ``POST /control/faults`` to set the fault
switches while it runs. A call under a key whose first call is still running (its answer held
by the ``late`` fault) is answered 409, "in progress", and applies nothing, as Stripe does.
Every route asks for ``Authorization: Bearer <credential>`` when a
credential is configured. Bodies are read up to ``MAX_BODY_BYTES``; anything that is not a
JSON object is a 400, never a crash."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from lab.provider.book import BAD_REQUEST, Books, Ledger, Operation
from lab.provider.faults import Faults, FaultSettings
from shared.effects.provider import IN_PROGRESS, ProviderAnswer
from shared.errors import ConfigurationError
from shared.logsafe import problems, shown

MAX_BODY_BYTES = 64 * 1024
MAX_KEY_CHARS = 255
"""Stripe's limit on an idempotency key."""
KEY_HEADER = "Idempotency-Key"
UNAUTHORIZED = 401
UNAVAILABLE = 503

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PaymentProvider:
    """The books, the fault switches and the credential of one provider. ``ledger_file``:
    the books are read from it at start (when it exists) and written to it after every
    change, so a provider run as its own process keeps its keys and ledger across restarts."""

    def __init__(
        self,
        *,
        credential: str | None = None,
        faults: FaultSettings | None = None,
        ledger_file: Path | None = None,
    ) -> None:
        self.credential = credential
        self.faults = Faults(faults)
        self.ledger_file = ledger_file
        self.books = _load(ledger_file) if ledger_file and ledger_file.exists() else Books()
        self.running: set[str] = set()
        """Keys whose first call is applied but not yet answered (a late answer)."""

    def ledger(self) -> Ledger:
        """Every charge and refund, and the faults injected (``GET /ledger``)."""
        injected = {str(fault): count for fault, count in self.faults.injected.items()}
        return Ledger(entries=list(self.books.entries), faults=injected)

    def web_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._authorized])
        app.router.add_post("/v1/charges", self._operation("charge"))
        app.router.add_post("/v1/refunds", self._operation("refund"))
        app.router.add_get("/ledger", self._ledger)
        app.router.add_post("/control/faults", self._set_faults)
        return app

    @web.middleware
    async def _authorized(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.credential is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, f"Bearer {self.credential}".encode()):
                return _refusal(UNAUTHORIZED, "missing or wrong credential", "unauthorized")
        return await handler(request)

    def _operation(self, operation: Operation) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            key = request.headers.get(KEY_HEADER)
            if not key or len(key) > MAX_KEY_CHARS:
                return _refusal(BAD_REQUEST, f"{KEY_HEADER}: 1-{MAX_KEY_CHARS} characters")
            body = await _json_object(request)
            if isinstance(body, web.Response):
                return body
            if key in self.running:
                return _refusal(IN_PROGRESS, "a request with this key is running", "in_progress")
            fault = self.faults.draw()
            if fault == "unavailable":
                return _refusal(UNAVAILABLE, "try again later", "unavailable")
            known = key in self.books.answers
            answer = self._apply(operation, body, key)
            if fault == "drop":
                return _dropped(request)
            if fault == "late":
                first = not known and key in self.books.answers
                await self._answer_late(key, first)
            return web.json_response(answer.body, status=answer.status)

        return handle

    async def _answer_late(self, key: str, first: bool) -> None:
        """Hold the answer. The key of the call that saved its answer stays in progress
        meanwhile: Stripe releases a key only when the request that took it ends."""
        if not first:
            await asyncio.sleep(self.faults.settings.late_seconds)
            return
        self.running.add(key)
        try:
            await asyncio.sleep(self.faults.settings.late_seconds)
        finally:
            self.running.discard(key)

    def _apply(self, operation: Operation, body: dict[str, Any], key: str) -> ProviderAnswer:
        known = len(self.books.answers)
        answer = self.books.apply(operation, body, key)
        if self.ledger_file is not None and len(self.books.answers) != known:
            _save(self.books, self.ledger_file)
        return answer

    async def _ledger(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.ledger().model_dump())

    async def _set_faults(self, request: web.Request) -> web.StreamResponse:
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            settings = FaultSettings.model_validate(body)
        except ValidationError as error:
            return _refusal(BAD_REQUEST, problems(error, "fault settings"))
        self.faults.set(settings)
        return web.json_response(settings.model_dump())


@contextlib.asynccontextmanager
async def serving(
    provider: PaymentProvider, port: int = 0, host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """Serve ``provider`` on ``host``:``port`` (0: a free port); yields its base URL. Calls
    still holding a late answer are cut short when it stops."""
    runner = web.AppRunner(provider.web_app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        yield f"http://{host}:{bound}"
    finally:
        await runner.cleanup()


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _refusal(413, f"the body is larger than {MAX_BODY_BYTES} bytes", "too_large")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return _refusal(BAD_REQUEST, f"the body is not JSON: {shown(error)}")
    if not isinstance(body, dict):
        return _refusal(BAD_REQUEST, "the body must be a JSON object")
    return body


def _dropped(request: web.Request) -> web.StreamResponse:
    """Close the connection without an answer: the client cannot know what was applied."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response()


def _refusal(status: int, message: str, code: str = "invalid_request") -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


def _load(path: Path) -> Books:
    try:
        return Books.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as error:
        raise ConfigurationError(f"cannot read the ledger {shown(path)}: {shown(error)}") from None


def _save(books: Books, path: Path) -> None:
    """Write the whole file beside the old one, then rename: a kill leaves one or the other."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(books.model_dump_json())
    os.replace(partial, path)
