"""One request to one of the app's own web routes, from its body to its answer
(``shared.web``; the worker's ``route`` calls it for the HTTP functions, and tests call it
directly).

A route shares the HTTP ingress's limits: the instance's requests in progress
(``BUS_HTTP_CONCURRENCY``), its body budget (``BUS_BODY_BUDGET_BYTES``) and the request's time
(``BUS_INGRESS_TIMEOUT``), past any of which the answer is 503 with ``Retry-After``; and its
own body bound, past which it is 413 before the handler runs. A request stopped midway is a
crash the session protocol recovers from: its retry with the same key finds out.

What the handler raises is answered, never shown as a traceback:

- ``WebError``: its own status (a 4xx);
- bad input (``BadRequest``, ``InvalidName``, ``InvalidValue``, ``MessageSchemaError``): 400;
- ``NotSignedIn`` (the Entra option on, no caller the platform names): 401;
- ``SessionConflict``, ``IdempotencyKeyReused``: 409;
- ``MessageTooLarge``, ``LimitExceeded``: 413;
- storage that does not answer (``StorageError``, ``OutcomeUnknown``, ``StateUnreachable``
  among them, ``ConflictRetriesExhausted``, ``NewerVersion``, a timeout): 503, to retry with
  the same key;
- anything else: 500, logged with its traceback.
"""

from __future__ import annotations

import asyncio
import logging

from shared.bus import Bus
from shared.bus.budget import Holding
from shared.bus.http_routes import HttpRoute
from shared.errors import (
    ConflictRetriesExhausted,
    IdempotencyKeyReused,
    InvalidName,
    InvalidValue,
    LimitExceeded,
    MessageSchemaError,
    MessageTooLarge,
    NewerVersion,
    OutcomeUnknown,
    SessionConflict,
    StorageError,
)
from shared.http_ingress import IDEMPOTENCY_HEADER, BadRequest, busy, response_headers
from shared.logsafe import shown
from shared.platform_identity import NotSignedIn
from shared.settings import StorageTimeouts
from shared.web import WebError, WebRequest, WebResponse, error_response

log = logging.getLogger(__name__)

_CLIENT_ERRORS: tuple[tuple[type[Exception], int], ...] = (
    (WebError, 0),  # its own status
    (BadRequest, 400),
    (InvalidName, 400),
    (InvalidValue, 400),
    (MessageSchemaError, 400),
    (NotSignedIn, 401),
    (SessionConflict, 409),
    (IdempotencyKeyReused, 409),
    (MessageTooLarge, 413),
    (LimitExceeded, 413),
)
_UNAVAILABLE = (StorageError, OutcomeUnknown, ConflictRetriesExhausted, NewerVersion, TimeoutError)


async def serve(
    bus: Bus,
    route: HttpRoute,
    request: WebRequest,
    *,
    seconds: float = StorageTimeouts.ingress,
    spent_seconds: float = 0.0,
) -> WebResponse:
    """``route``'s answer to ``request`` within ``seconds`` (``BUS_INGRESS_TIMEOUT``), of
    which ``spent_seconds`` went before (the worker's start-up subscription)."""
    if len(request.body) > route.max_body_bytes:
        return _answer(
            error_response(
                413,
                f"request body is {len(request.body):,} bytes; this route takes at most "
                f"{route.max_body_bytes:,} bytes",
            )
        )
    gate = bus.ingress_requests
    if not gate.try_enter():
        why = f"{gate.limit} requests are in progress on this instance (BUS_HTTP_CONCURRENCY)"
        return _answer(error_response(503, busy(why).body["error"]))
    try:
        return await _held(bus, route, request, max(seconds - spent_seconds, 0.0))
    finally:
        gate.leave()


async def _held(bus: Bus, route: HttpRoute, request: WebRequest, seconds: float) -> WebResponse:
    # The body is counted against the worker's body budget while the handler runs, as the
    # ingress's is: what the handler builds from it is what multiplies it.
    holding = Holding(bus.budget)
    if not await holding.take("request", len(request.body), 0.0):
        why = f"the worker's body budget has no room for {len(request.body):,} bytes now"
        return _answer(error_response(503, busy(f"{why} (BUS_BODY_BUDGET_BYTES)").body["error"]))
    try:
        async with asyncio.timeout(seconds):
            return await _handled(bus, route, request)
    except TimeoutError:
        text = f"no answer within {seconds:g} s; retry with the same {IDEMPOTENCY_HEADER}"
        return _answer(error_response(503, text))
    finally:
        await holding.release_all()


async def _handled(bus: Bus, route: HttpRoute, request: WebRequest) -> WebResponse:
    try:
        response = await route.handler(request, bus)
    except Exception as error:
        return _answer(_refusal(route, error))
    if not isinstance(response, WebResponse):
        log.error("route %s answered %s, not a WebResponse", route.name, type(response).__name__)
        return error_response(500, "internal server error")
    return response


def _refusal(route: HttpRoute, error: Exception) -> WebResponse:
    for kind, status in _CLIENT_ERRORS:
        if isinstance(error, kind):
            code = error.status if isinstance(error, WebError) else status
            return error_response(code, str(error))
    if isinstance(error, _UNAVAILABLE):
        log.warning("route %s: storage did not answer: %s", route.name, shown(error))
        text = f"storage unavailable, retry with the same {IDEMPOTENCY_HEADER}: {error}"
        return error_response(503, text)
    log.error("route %s failed", route.name, exc_info=error)
    return error_response(500, "internal server error")


def _answer(response: WebResponse) -> WebResponse:
    """``response`` with ``Retry-After`` on a 503, as the ingress answers one."""
    extra = response_headers(response.status)
    return WebResponse(
        response.status, response.body, response.content_type, {**response.headers, **extra}
    )
