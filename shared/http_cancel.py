"""HTTP cancel: ``POST /api/messages/cancel`` cancels what was sent under an ``Idempotency-Key``
(``shared.bus.client_cancel``), with the ingress's function key and the same key scopes
(``shared.http_ingress.http_scope``): a caller cancels only what its own scope sent.

Answers (JSON): 200 with ``{"idempotency_key", "outcome", "messages"}``, ``outcome`` being
``cancelled`` (never processed), ``processed`` (processed before the cancel: nothing undone),
``not_found`` or, for a publish whose messages ended differently, ``mixed`` (``messages``
holds each message id's answer); 404 when the scope sent nothing under the key; 400 for a
missing or malformed key; 401 as the ingress; 409 when a message went to an endpoint that
cannot be cancelled (another app's, or not in token mode); 503 with ``Retry-After`` when
storage could not be reached in time, a newer version wrote what was read, or the instance
is busy. A cancel may be repeated: it answers as the first did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from shared.bus import Bus
from shared.bus.client_cancel import cancel_by_key
from shared.errors import (
    BusError,
    CancelRefused,
    InvalidName,
    NewerVersion,
    OutcomeUnknown,
    StorageError,
)
from shared.http_ingress import (
    HTTP_SCOPE,
    IDEMPOTENCY_HEADER,
    NO_PLATFORM_SIGN_IN,
    Answer,
    BadRequest,
    busy,
    http_scope,
    idempotency_key,
)
from shared.logsafe import shown
from shared.platform_identity import NotSignedIn, PlatformAuth
from shared.settings import StorageTimeouts

log = logging.getLogger(__name__)


async def handle(
    bus: Bus,
    headers: Mapping[str, str],
    *,
    ingress_seconds: float = StorageTimeouts.ingress,
    spent_seconds: float = 0.0,
    platform: PlatformAuth = NO_PLATFORM_SIGN_IN,
) -> Answer:
    """The whole cancel request within ``ingress_seconds`` (of which ``spent_seconds`` were
    used before), counted among the ingress's requests in progress. A request stopped midway
    is a crash the cancel procedure recovers from: the retry answers."""
    gate = bus.ingress_requests
    if not gate.try_enter():
        return busy(
            f"{gate.limit} requests are in progress on this instance (BUS_HTTP_CONCURRENCY)"
        )
    try:
        async with asyncio.timeout(max(ingress_seconds - spent_seconds, 0.0)):
            return await _cancel(bus, headers, platform)
    except TimeoutError:
        error = f"storage did not answer within {ingress_seconds:g} s, retry the cancel"
        return Answer(503, {"error": error})
    finally:
        gate.leave()


async def _cancel(bus: Bus, headers: Mapping[str, str], platform: PlatformAuth) -> Answer:
    try:
        key = idempotency_key(headers)
    except BadRequest as e:
        return Answer(400, {"error": str(e)})
    try:
        scope = http_scope(bus.config, platform, headers)
    except NotSignedIn as e:
        return Answer(401, {"error": str(e)})
    try:
        # Under Entra ID a record of the previous version cannot say which caller wrote it.
        receipt = await cancel_by_key(
            bus, key, sender="http", scope=scope, legacy=scope == HTTP_SCOPE
        )
    except InvalidName as e:
        return Answer(400, {"error": str(e)})
    except CancelRefused as e:
        return Answer(409, {"error": str(e)})
    except NewerVersion as e:
        log.warning("cancel %s: %s", shown(key), shown(e))
        return Answer(503, {"error": f"{e}; retry the cancel"})
    except (StorageError, OutcomeUnknown, BusError) as e:
        log.warning("cancel %s failed: %s", shown(key), shown(e))
        return Answer(503, {"error": f"storage unavailable, retry the cancel: {e}"})
    if receipt is None:
        error = f"nothing was sent under {IDEMPOTENCY_HEADER} {key!r} by this caller"
        return Answer(404, {"error": error})
    return Answer(200, receipt.as_json())
