"""The console's own request and response: what its handlers see, whatever serves them.

The local server (aiohttp) and the deployed HTTP function (``azure.functions``) translate
their requests into ``Request`` and ``Response`` back, at their edge; nothing else of either
framework reaches the handlers. Header names are kept in lower case.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = "application/json; charset=utf-8"


@dataclass(frozen=True)
class Request:
    """One request to the console. ``path`` is relative to the console's root (``/``,
    ``/console.js``, ``/api/overview``), percent-decoded once by the adapter; ``origin`` is
    the console's own origin as the adapter knows it (``http://127.0.0.1:8765``), which an
    ``Origin`` header must equal."""

    method: str
    path: str
    origin: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lower-case names."""
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Streamed:
    """An answer's body handed out in chunks rather than held: ``length`` bytes in all,
    which ``chunks()`` yields in order. An error while it streams ends the answer short of
    its length (its headers are gone already), which every client reports as incomplete."""

    length: int
    chunks: Callable[[], AsyncIterator[bytes]]


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)
    stream: Streamed | None = None
    """In place of ``body``: a large download."""


def lower_headers(pairs: Mapping[str, str]) -> dict[str, str]:
    """Header names in lower case; of a name given twice, the last value."""
    return {name.lower(): value for name, value in pairs.items()}


def json_response(status: int, value: Any) -> Response:
    """``value`` as JSON. Every non-ASCII or markup character is escaped (``<`` as ``\\u003c``)
    so that no byte of an answer reads as HTML, whatever a browser guesses."""
    text = json.dumps(value, ensure_ascii=True)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return Response(status, text.encode("ascii"), JSON)


def error_response(status: int, text: str, *, sign_in: str | None = None) -> Response:
    """``{"error": text}``, with ``"sign_in"`` naming the credential the page should ask
    for when a refusal is one the operator can mend by signing in."""
    value = {"error": text} if sign_in is None else {"error": text, "sign_in": sign_in}
    return json_response(status, value)
