"""HTTP ingress: ``POST /api/messages`` sends a command or publishes an event exactly once
per ``Idempotency-Key`` within the ingress window (BusConfig.ingress_window_seconds).

Request body: ``{"type": "PlaceOrder", "to": "orders", "body": {...}}``. ``to`` names the
destination of a command; it may be left out when exactly one endpoint handles the type, and
must be left out for an event (events go to the topic's subscribers). A delayed message adds
``"delay_seconds": 600`` or ``"deliver_at": "2026-12-01T09:00:00+00:00"`` (``shared.bus.schedule``).

Answers (JSON): 202 with ``{"idempotency_key", "message_ids", "deduplicated": false}`` for a
new key; 200 with the same message ids and ``"deduplicated": true`` for a repeat of the same
message (type, destination, body, due time: the same request as sent, or the same message
as this version's model reads it; ``shared.bus.ingress``); 409 with ``{"error": ...}`` naming
the key when it was used for a different message within the window (nothing sent); 400 with
``{"error": ...}`` for bad input (a repeated ``Idempotency-Key`` header or a key with a
comma included); 401 with the Entra option on when no Entra caller the platform vouches for
is named (``http_scope``); 413 for a body over the payload limit; 503 with ``Retry-After``
when storage could not be reached, or when the key's record was written by a newer version
of the bus during a rolling deploy (retry with the same key: the retry reaches an upgraded
instance), and when the instance is busy: ``BUS_HTTP_CONCURRENCY`` requests in progress, or
no room for the body in the worker's body budget (``shared.bus.budget``), checked before the
body is parsed. A W3C ``traceparent`` header puts the messages sent into the caller's trace
(``shared.bus.telemetry``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.bus import Bus, BusApp, BusConfig, Command, Event, Message
from shared.bus.budget import Holding
from shared.bus.effects import EffectAnswered, EffectRequest
from shared.bus.ingress import check_idempotency_key, request_digest
from shared.bus.messages import check_payload_size, declared_type
from shared.bus.reading import read_body
from shared.bus.routes import UndeliverableMessage
from shared.bus.telemetry import continuing
from shared.errors import (
    BusError,
    IdempotencyKeyReused,
    InvalidName,
    InvalidValue,
    MessageSchemaError,
    MessageTooLarge,
    NewerVersion,
    OutcomeUnknown,
    StorageError,
)
from shared.logsafe import shown
from shared.platform_identity import (
    NotSignedIn,
    PlatformAuth,
    entra_principal,
    require_platform_sign_in,
)
from shared.settings import StorageTimeouts
from shared.stores.names import holds_lone_surrogate

log = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "Idempotency-Key"
HTTP_SCOPE = "http"
"""Whose keys an HTTP request's are (``shared.bus.ingress``): every function-key holder's."""
NO_PLATFORM_SIGN_IN = PlatformAuth()
"""Where no platform authentication is in front (``bus`` and the tools): no caller named."""


def http_scope(config: BusConfig, platform: PlatformAuth, headers: Mapping[str, str]) -> str:
    """Whose keys a request's are: ``http`` (every holder of a function key alike), or with
    the Entra option (``BusConfig.ingress_entra_callers``) ``http:<caller object id>``, so one
    caller's key never answers another's. NotSignedIn when the option is on and the request
    names no caller the platform vouches for (``shared.platform_identity.entra_principal``:
    App Service authentication on, signed in with Entra ID, an object id)."""
    if not config.ingress_entra_callers:
        return HTTP_SCOPE  # a caller-sent principal header means nothing here
    return f"{HTTP_SCOPE}:{entra_principal(platform, headers).object_id}"


def check_platform(config: BusConfig, platform: PlatformAuth) -> None:
    """At start-up: a ConfigurationError when the Entra option is on but App Service
    authentication is not, so that no key holder could name itself another caller."""
    if config.ingress_entra_callers:
        require_platform_sign_in(platform, "BUS_INGRESS_ENTRA_CALLERS")


CLIENT_READER = "ingress"
"""Who reads a client's message (HTTP, ``bus send``/``publish``, a bulk row), in telemetry."""
ENVELOPE_SLACK_BYTES = 4096
"""Room for ``type``/``to`` and JSON framing around a body of the maximum payload size."""


class BadRequest(BusError):
    """The request cannot be turned into a message; the text says why (HTTP 400)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]

    def json(self) -> str:
        return json.dumps(self.body)


RETRY_AFTER_SECONDS = 10
"""What a 503 asks the client to wait before its retry with the same key: an outage may
have passed, or (a newer version's record) the retry may reach an upgraded instance."""


def response_headers(status: int) -> dict[str, str]:
    """The headers of an answer with ``status`` besides its content type: ``Retry-After`` on
    a 503, every one of which the same request may be retried after."""
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}


def message_types(app: BusApp) -> dict[str, type[Message]]:
    """Every message type some endpoint of ``app``, or an external endpoint it declares,
    takes, by type name: its current name and its former ones (``Message.former_names``)."""
    found: dict[str, type[Message]] = {}
    for external in app.routes.external.values():
        found.update(external.accepts)
    for endpoint in app.endpoints.values():
        found.update(endpoint.accepted)
    return found


def unroutable(app: BusApp, type_name: str, to: str | None) -> str:
    """Why a type no endpoint takes cannot be sent, saying what the type is when known."""
    declared = declared_type(type_name)
    if declared is None:
        known = ", ".join(sorted(message_types(app)))
        return f"unknown message type {type_name!r}; known types: {known}"
    nobody = "no endpoint of this app handles it and no external endpoint accepts it"
    if issubclass(declared, Event):
        extra = "; events are published, leave out 'to'" if to is not None else ""
        return (
            f"{type_name} is an event without subscribers ({nobody}): it would reach nobody{extra}"
        )
    return f"{type_name} is a command no endpoint takes ({nobody})"


def client_type(app: BusApp, type_name: str, to: str | None) -> type[Message]:
    """The model of a type a client may send under ``type_name``; BadRequest for a type no
    endpoint takes, and for the bus's own effect requests and answers: an answer says the
    provider charged, so a client's copy would be believed. Handlers request effects and the
    performer answers them, nobody else (docs/effects.md, section 7)."""
    model = message_types(app).get(type_name)
    if model is None:
        raise BadRequest(unroutable(app, type_name, to))
    if issubclass(model, EffectRequest | EffectAnswered):
        raise BadRequest(
            f"{model.type_name()} belongs to the bus's effects: only a handler requests an "
            "effect, and only the performer answers one"
        )
    return model


@dataclass(frozen=True)
class ClientMessage:
    """A client's message as ``build_message`` read it, for ``IngressClient.submit``."""

    message: Message
    to: str | None
    """Its destination: None for an event."""
    request: str
    """``request_digest`` of what the client sent, so that its retry is recognised by any
    version of the app (``shared.bus.ingress``, ``Fingerprints``)."""


def build_message(
    app: BusApp,
    type_name: str,
    body: object,
    to: str | None,
    *,
    config: BusConfig,
    to_field: str = "'to'",
) -> ClientMessage:
    """The validated message, its destination (None for an event) and the request's digest;
    BadRequest otherwise (MessageTooLarge for a request over the payload limit and
    ``ENVELOPE_SLACK_BYTES``). ``to_field`` names where the caller gave ``to`` in the errors
    ('to', --to). The type may be named by a former name; the message is of its current type.
    The one path of the HTTP ingress, ``bus send``/``publish`` and a bulk job's rows."""
    model = client_type(app, type_name, to)
    if not isinstance(body, dict):
        raise BadRequest("'body' must be a JSON object with the message's fields")
    if holds_lone_surrogate(body):  # no storage request can carry one (a bulk row's text)
        raise BadRequest("the body holds text that is not valid Unicode (a lone surrogate)")
    try:
        message = read_body(model, body, reader=CLIENT_READER, telemetry=config.telemetry)
    except MessageSchemaError as e:
        raise BadRequest(f"invalid {shown(type_name, 100)}: {e}") from None
    sent_to = destination(app, model.type_name(), model, to, to_field=to_field)
    # The body as given, read_body's dropped fields included: the next version may read them.
    limit = config.max_payload_bytes + ENVELOPE_SLACK_BYTES
    request = request_digest(type_name, to, body, limit)
    if request is None:
        check_payload_size(message, config.max_payload_bytes)  # the body's size, if it is that
        raise MessageTooLarge(
            f"the {shown(type_name, 100)} request is over {limit:,} bytes as JSON "
            f"(BUS_MAX_PAYLOAD_BYTES and {ENVELOPE_SLACK_BYTES:,} for the request's own fields)"
        )
    return ClientMessage(message, sent_to, request)


def destination(
    app: BusApp, type_name: str, model: type[Message], to: str | None, *, to_field: str
) -> str | None:
    """Where a client's message of ``model`` goes: the endpoint of a command (``to``, or the
    one endpoint that handles it), None for an event (published to its topic's subscribers).
    BadRequest says why it cannot be sent. The one rule for the HTTP ingress, ``bus send`` and
    the bulk job."""
    if issubclass(model, Event):
        if to is not None:
            raise BadRequest(
                f"{type_name} is an event: it is published to its topic's subscribers, not "
                f"sent to one endpoint; leave out {to_field}"
            )
        return None
    if not issubclass(model, Command):
        raise BadRequest(
            f"{type_name} is neither a Command nor an Event: clients send commands and "
            "publish events"
        )
    handlers = app.routes.receivers_of(type_name)
    if to is None:
        if len(handlers) != 1:
            raise BadRequest(
                f"{type_name} is a command handled by {handlers}: say which endpoint gets it "
                f"with {to_field}"
            )
        return handlers[0]
    if to not in handlers:
        raise BadRequest(f"endpoint {to!r} does not handle {type_name}; handled by {handlers}")
    return to


@dataclass(frozen=True)
class IngressRequest:
    """What a request asks for: a message, its destination (commands) and request digest
    (``ClientMessage``), and when it is due."""

    sent: ClientMessage
    delay: timedelta | None = None
    deliver_at: datetime | None = None


FIELDS = ("type", "to", "body", "delay_seconds", "deliver_at")


def read_json(
    raw: bytes, shape: str = '{"type": ..., "body": {...}}', what: str = "a message"
) -> object:
    """A request body's JSON value; BadRequest for text that is not JSON (``shape`` says what
    was expected), nested too deeply to be ``what``, or holding text no storage request can
    carry. The ingress's rule, and the app's own routes' (``shared.web``)."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise BadRequest(f"the body must be JSON: {shape}") from None
    except RecursionError:
        # The parser recurses once per level: a few thousand '[' exhaust the stack.
        raise BadRequest(f"the body is nested too deeply to be {what}") from None
    _check_unicode(data)
    return data


def parse_request(app: BusApp, raw: bytes, config: BusConfig) -> IngressRequest:
    data = read_json(raw)
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    extra = set(data) - set(FIELDS)
    if extra:
        raise BadRequest(f"unexpected fields {sorted(extra)}; allowed: {', '.join(FIELDS)}")
    type_name, to = data.get("type"), data.get("to")
    if not isinstance(type_name, str):
        raise BadRequest("'type' (the message type name) is required")
    if to is not None and not isinstance(to, str):
        raise BadRequest("'to' must be an endpoint name")
    sent = build_message(app, type_name, data.get("body", {}), to, config=config)
    return IngressRequest(
        sent, _delay(data.get("delay_seconds")), _deliver_at(data.get("deliver_at"))
    )


def _delay(value: object) -> timedelta | None:
    if value is None:
        return None
    # bool is an int to Python, and true is no number of seconds.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest("'delay_seconds' must be a number of seconds")
    if value < 0:
        raise BadRequest("'delay_seconds' must not be negative")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise BadRequest("'delay_seconds' is too large") from None


def _deliver_at(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest("'deliver_at' must be an ISO 8601 time with a time zone")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"'deliver_at' is not an ISO 8601 time: {value[:64]!r}") from None


def _check_unicode(data: object) -> None:
    """JSON may escape lone surrogates (``"\\udcff"``), which no UTF-8 text can hold: every
    later step (the envelope, storage) would fail on them, so they are refused here."""
    if holds_lone_surrogate(data):
        raise BadRequest("the body holds text that is not valid Unicode (a lone surrogate)")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


async def handle(
    bus: Bus,
    headers: Mapping[str, str],
    raw: bytes,
    *,
    ingress_seconds: float = StorageTimeouts.ingress,
    spent_seconds: float = 0.0,
    platform: PlatformAuth = NO_PLATFORM_SIGN_IN,
) -> Answer:
    """The whole ingress request, independent of the HTTP framework, within
    ``ingress_seconds`` (BUS_INGRESS_TIMEOUT: the worker passes ``AppConfig.timeouts.ingress``),
    of which ``spent_seconds`` were used before (the worker's start-up subscription): a
    request stopped midway is a crash the protocol recovers from, the retry answers once."""
    seconds = ingress_seconds
    gate = bus.ingress_requests
    if not gate.try_enter():
        return busy(
            f"{gate.limit} requests are in progress on this instance (BUS_HTTP_CONCURRENCY)"
        )
    try:
        # A W3C traceparent header (untrusted: a malformed one starts a new trace) is the
        # parent of the ingress span, so the messages sent join the caller's trace.
        with continuing(headers):
            async with asyncio.timeout(max(seconds - spent_seconds, 0.0)):
                return await _handle(bus, headers, raw, platform)
    except TimeoutError:
        error = (
            f"storage did not answer within {seconds:g} s, retry with the same {IDEMPOTENCY_HEADER}"
        )
        return Answer(503, {"error": error})
    finally:
        gate.leave()


def busy(why: str) -> Answer:
    """The 503 of an instance with no room for the request now (``response_headers`` adds
    its ``Retry-After``): nothing was read or sent, the same request may come again."""
    error = f"busy: {why}; retry after {RETRY_AFTER_SECONDS} s with the same {IDEMPOTENCY_HEADER}"
    return Answer(503, {"error": error})


async def _handle(
    bus: Bus, headers: Mapping[str, str], raw: bytes, platform: PlatformAuth
) -> Answer:
    limit = bus.config.max_payload_bytes + ENVELOPE_SLACK_BYTES
    if len(raw) > limit:
        error = (
            f"request body is {len(raw):,} bytes; the limit is {limit:,} bytes "
            f"(BUS_MAX_PAYLOAD_BYTES and {ENVELOPE_SLACK_BYTES:,} for the request's own fields)"
        )
        return Answer(413, {"error": error})
    # The host hands the body over whole (its Content-Length, at most the 100 MB it accepts):
    # its size is counted against the worker's body budget before it is parsed, the parse
    # and what is built from it being what multiplies it (shared.bus.budget).
    holding = Holding(bus.budget)
    if not await holding.take("request", len(raw), 0.0):
        return busy(
            f"the worker's body budget has no room for {len(raw):,} bytes now "
            "(BUS_BODY_BUDGET_BYTES)"
        )
    try:
        return await _accept(bus, headers, raw, platform)
    finally:
        await holding.release_all()


def idempotency_key(headers: Mapping[str, str]) -> str:
    """The request's ``Idempotency-Key`` as it was sent; BadRequest when there is none or it
    may be two. The ingress's rule, and the app's own routes' (``shared.web``)."""
    key = _header(headers, IDEMPOTENCY_HEADER)
    if key is None or not key.strip():
        raise BadRequest(f"the {IDEMPOTENCY_HEADER} header is required")
    if "," in key:
        # Repeated headers reach a function joined by commas, so "a, b" may be two keys:
        # taking either (or both as one) could send a message the client sent under the other.
        raise BadRequest(f"send one {IDEMPOTENCY_HEADER} header, without commas in the key")
    return key


async def _accept(
    bus: Bus, headers: Mapping[str, str], raw: bytes, platform: PlatformAuth
) -> Answer:
    try:
        key = idempotency_key(headers)
    except BadRequest as e:
        return Answer(400, {"error": str(e)})
    try:
        scope = http_scope(bus.config, platform, headers)
    except NotSignedIn as e:
        return Answer(401, {"error": str(e)})
    try:
        check_idempotency_key(key)
        request = parse_request(bus.app, raw, bus.config)
        # Under Entra ID a record of the previous version cannot say which caller wrote it.
        client = bus.client("http", scope=scope, legacy=scope == HTTP_SCOPE)
        receipt = await client.submit(
            request.sent.message,
            to=request.sent.to,
            idempotency_key=key,
            delay=request.delay,
            deliver_at=request.deliver_at,
            request=request.sent.request,
        )
    except IdempotencyKeyReused as e:
        return Answer(409, {"error": str(e)})
    except (BadRequest, InvalidName, InvalidValue) as e:
        return Answer(400, {"error": str(e)})
    except MessageTooLarge as e:
        return Answer(413, {"error": str(e)})
    except UndeliverableMessage as e:
        log.error("ingress %s: %s", key, e)  # a recipient list the app does not allow
        return Answer(503, {"error": f"cannot be delivered as the bus is configured: {e}"})
    except NewerVersion as e:
        log.warning("ingress %s: %s", shown(key), shown(e))
        error = f"{e}; retry with the same {IDEMPOTENCY_HEADER}"
        return Answer(503, {"error": error})
    except (StorageError, OutcomeUnknown, BusError) as e:
        log.warning("ingress %s failed: %s", key, e)
        return Answer(
            503, {"error": f"storage unavailable, retry with the same {IDEMPOTENCY_HEADER}: {e}"}
        )
    return Answer(200 if receipt.deduplicated else 202, receipt.as_json())
