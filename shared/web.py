"""What the app's own web routes see and answer (``shared.bus.http_routes``), whatever serves
them: the Functions host through ``shared.bindings``, the local host, or a test calling
``shared.web_serving.serve``.

A route handler takes a ``WebRequest`` and the running ``Bus`` and answers a ``WebResponse``.
The request reads its input by the HTTP ingress's rules, so that a route and ``POST
/api/messages`` refuse the same things: ``json``/``model`` (JSON the ingress would read:
neither too deep nor holding a lone surrogate), ``idempotency_key`` (required, one header, a
key storage takes) and ``scope`` (whose keys the caller's are: ``http``, or ``http:<object
id>`` with ``BUS_INGRESS_ENTRA_CALLERS``, believed only from the platform's sign-in). Each
raises an error ``serve`` answers as a 4xx naming what is wrong; a handler raises ``WebError``
for an answer of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shared.bus.config import BusConfig
from shared.bus.ingress import check_idempotency_key
from shared.errors import BusError
from shared.http_ingress import (
    NO_PLATFORM_SIGN_IN,
    BadRequest,
    http_scope,
    idempotency_key,
    read_json,
)
from shared.logsafe import problems
from shared.platform_identity import PlatformAuth

T = TypeVar("T", bound=BaseModel)
JSON = "application/json"


class WebError(BusError):
    """An answer a route handler gives instead of its response: ``status`` (a 4xx) and a text
    saying why, answered as ``{"error": text}``."""

    def __init__(self, status: int, text: str) -> None:
        if not 400 <= status <= 499:
            raise ValueError(f"a WebError is a client's error (4xx), not {status}")
        super().__init__(text)
        self.status = status


@dataclass(frozen=True)
class WebRequest:
    """One request to a route. ``headers`` as received: on Azure a repeated header reaches
    the function once, its values joined by ``", "`` (the local host does the same)."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    query: Mapping[str, str] = field(default_factory=dict)
    route_params: Mapping[str, str] = field(default_factory=dict)
    """The route's ``{name}`` segments, as the host matched them."""
    platform: PlatformAuth = NO_PLATFORM_SIGN_IN
    """App Service authentication as read at start-up: whether principal headers are the
    platform's (``shared.platform_identity``)."""

    def header(self, name: str) -> str | None:
        """A header's value, its name matched whatever its case."""
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)

    def json(self) -> object:
        """The body's JSON value; BadRequest (400) for one the ingress would refuse."""
        return read_json(self.body, "a JSON document", "read")

    def model(self, model: type[T]) -> T:
        """The body read as ``model``; BadRequest (400) naming each field that is wrong."""
        data = self.json()
        try:
            return model.model_validate(data)
        except ValidationError as e:
            raise BadRequest(f"invalid {model.__name__}: {problems(e, 'body')}") from None

    def idempotency_key(self) -> str:
        """The ``Idempotency-Key`` header by the ingress's rules: BadRequest when missing or
        repeated, InvalidName (400) for a key storage would refuse."""
        return check_idempotency_key(idempotency_key(self.headers))

    def scope(self, config: BusConfig) -> str:
        """Whose idempotency keys the caller's are, as the ingress says it
        (``shared.http_ingress.http_scope``); NotSignedIn (401) with the Entra option on and
        no caller the platform vouches for."""
        return http_scope(config, self.platform, self.headers)


@dataclass(frozen=True)
class WebResponse:
    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, value: Any) -> WebResponse:
        return cls(status, json.dumps(value).encode())


def error_response(status: int, text: str, headers: Mapping[str, str] | None = None) -> WebResponse:
    """``{"error": text}``."""
    return WebResponse(status, json.dumps({"error": text}).encode(), JSON, dict(headers or {}))
