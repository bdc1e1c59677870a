"""Single requests sent through an SDK client's own HTTP pipeline.

On the hot path of every message, the SDK's per-call machinery costs more client CPU than the
request itself: each ``get_blob_client(name)`` builds a new generated client, and every
response runs through model deserialisation. For the few blob requests a message makes (read
a token, claim it, delete it, create one), ``make bench`` showed that building the request
here and reading the three headers we need halves their client CPU. Authentication, retries,
timeouts and the transport stay the SDK's: the request goes through the client's pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from azure.core.rest import HttpRequest

from shared.stores.azure.errors import bounded, from_status


@dataclass(frozen=True)
class DirectResponse:
    status: int
    headers: Mapping[str, str]
    """Case-insensitive, as the transport gives them."""
    body: bytes


async def send(
    pipeline: Any,
    request: HttpRequest,
    what: str,
    expected: tuple[int, ...],
    seconds: float,
    **options: Any,
) -> DirectResponse:
    """Send ``request`` through ``pipeline`` (see ``sdk_internals.blob_pipeline``) and return
    the answer within ``seconds``, or raise the project's error for any status not in
    ``expected``. ``options`` go to the pipeline's policies (``retry_total=0`` for a create
    that must not be retried)."""
    async with bounded(what, seconds):
        result = await pipeline.run(request, **options)
        response = result.http_response
        # Reads and batches answer with a body; other answers carry only headers.
        body: bytes = response.content if request.method in ("GET", "POST") else b""
    status = int(response.status_code)
    if status not in expected:
        raise from_status(status, response.headers.get("x-ms-error-code", ""), what)
    return DirectResponse(status, response.headers, body)
