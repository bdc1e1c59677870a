"""Blob Batch delete requests, written and read by the project.

The SDK's ``delete_blobs`` builds its multipart body with the standard library's ``email``
generator, whose boundaries look like ``===============123==``. Azurite before 3.37 cannot
parse a boundary with '=' in it and answers the whole batch with one 400 (Azure/Azurite#2413),
so on the emulator every token delete of the cleanup became a request of its own. This module
writes the body with a boundary of the form the Blob Batch REST reference shows
(``batch_<uuid>``), which Azure and Azurite both accept, and reads the answer with the
multipart helpers of ``shared.stores.azure.batch``. The sub-requests are signed by the
client's own credential policy and the batch is sent through the client's pipeline (see
``shared.stores.azure.blob``), so authentication, retries and the transport stay the SDK's.

Wire format (Blob service REST API, "Blob Batch"): ``POST <container>?restype=container&
comp=batch`` with a ``multipart/mixed`` body of up to 256 ``application/http`` parts, each one
complete, individually authorised ``DELETE`` request; the answer (202) holds one HTTP response
per part, each carrying the ``Content-ID`` of its request.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.errors import InvalidValue
from shared.stores.azure.batch import (
    EncodedBatch,
    MalformedBatchResponse,
    boundary_of,
    http_response,
    multipart_parts,
    split_headers,
)

_CRLF = "\r\n"


@dataclass(frozen=True)
class SubRequest:
    """One request of the batch: ``path`` is the URL's path and query, as the request line
    names it; ``headers`` include its own authorisation."""

    method: str
    path: str
    headers: Mapping[str, str]


def _part(index: int, request: SubRequest) -> str:
    lines = [
        "Content-Type: application/http",
        "Content-Transfer-Encoding: binary",
        f"Content-ID: {index}",
        "",
        f"{request.method} {request.path} HTTP/1.1",
        *(f"{name}: {value}" for name, value in request.headers.items()),
        "",
        "",
    ]
    return _CRLF.join(lines)


def _check_header(text: str) -> None:
    # A line break in a header would let a blob name or an ETag write its own sub-request.
    if "\r" in text or "\n" in text:
        raise InvalidValue(f"a batch sub-request header contains a line break: {text!r}")


def encode_requests(requests: Sequence[SubRequest]) -> EncodedBatch:
    """The body of one Blob Batch request carrying ``requests`` in order (Content-ID 0..n-1)."""
    for request in requests:
        _check_header(request.path)
        for name, value in request.headers.items():
            _check_header(name)
            _check_header(value)
    boundary = f"batch_{uuid.uuid4()}"
    body = "".join(f"--{boundary}{_CRLF}{_part(i, r)}" for i, r in enumerate(requests))
    text = f"{body}--{boundary}--{_CRLF}"
    return EncodedBatch(f"multipart/mixed; boundary={boundary}", text.encode("utf-8"))


@dataclass(frozen=True)
class SubResponse:
    status: int
    error_code: str
    """The service's ``x-ms-error-code``, or empty."""


def decode_responses(content_type: str, body: bytes, count: int) -> list[SubResponse]:
    """Each sub-request's answer, in the order of the requests (matched by ``Content-ID``
    where the service gives it, else by position). Raises MalformedBatchResponse unless there
    is exactly one answer for each of the ``count`` requests."""
    text = body.decode("utf-8", errors="replace")
    answers: dict[int, SubResponse] = {}
    for position, piece in enumerate(multipart_parts(text, boundary_of(content_type))):
        part_headers, rest = split_headers(piece)
        response = http_response(rest)
        content_id = part_headers.get("content-id", "").strip()
        index = int(content_id) if content_id.isascii() and content_id.isdigit() else position
        if index >= count or index in answers:
            raise MalformedBatchResponse(
                f"batch response part {position}: Content-ID {content_id!r} does not name "
                f"one of the {count} requests, or names one twice"
            )
        answers[index] = SubResponse(response.status, response.headers.get("x-ms-error-code", ""))
    if len(answers) != count:
        raise MalformedBatchResponse(
            f"batch response answers {len(answers)} of the {count} requests"
        )
    return [answers[i] for i in range(count)]
