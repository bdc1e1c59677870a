"""Who may use the console, who they are, and what protects its actions.

Every ``/api/`` request is authenticated: locally by the token ``bus console`` prints (an
``Authorization: Bearer`` header, compared in constant time; a token in the address is
refused, since addresses end up in logs and histories); deployed by the platform (a function
key, or App Service authentication with Entra ID in front, whose signed-in name is trusted
only when ``BUS_CONSOLE_IDENTITY=entra``). Every action (a POST) must also carry the CSRF
value ``GET /api/session`` gives, a JSON body, and, when the browser sends one, an ``Origin``
that is the console's own; a read-only console refuses them all.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Protocol

from shared.console.http import Request
from shared.console.settings import ENTRA
from shared.errors import BusError

CSRF_HEADER = "x-console-csrf"
PRINCIPAL_HEADER = "x-ms-client-principal-name"
FUNCTION_KEY_WHO = "function key"
MAX_WHO_CHARS = 200


class Refused(BusError):
    """A request the console does not serve: ``status`` and why, for its JSON error."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


class Identify(Protocol):
    def __call__(self, request: Request) -> str:
        """Who sends ``request``; Refused (401) when it is not authenticated."""


@dataclass(frozen=True)
class BearerToken:
    """The local console: the token printed at start-up, sent as a bearer token."""

    token: str
    who: str

    def __call__(self, request: Request) -> str:
        if "token" in request.query:
            raise Refused(
                401,
                "the token belongs in the Authorization header, not the address (addresses "
                "are kept in logs and histories)",
            )
        sent = request.header("authorization") or ""
        scheme, _, given = sent.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), self.token.encode("ascii")
        ):
            raise Refused(401, "missing or wrong token: send Authorization: Bearer TOKEN")
        return self.who


@dataclass(frozen=True)
class PlatformIdentity:
    """The deployed console: the Functions host has checked the function key before the
    request arrives; with ``identity`` entra, App Service authentication has signed the
    caller in and names them in a header it sets (and strips from what callers send)."""

    identity: str

    def __call__(self, request: Request) -> str:
        if self.identity != ENTRA:
            return FUNCTION_KEY_WHO
        name = (request.header(PRINCIPAL_HEADER) or "").strip()
        if not name:
            raise Refused(401, "no signed-in user: the console needs Entra ID sign-in in front")
        return name[:MAX_WHO_CHARS]


@dataclass(frozen=True)
class Guard:
    identify: Identify
    csrf_key: bytes
    """Signs each user's CSRF value; the same on every instance that serves the console."""
    read_only: bool

    def csrf(self, who: str) -> str:
        """The CSRF value of ``who``: what ``GET /api/session`` gives and every POST sends."""
        return hmac.new(self.csrf_key, who.encode("utf-8"), hashlib.sha256).hexdigest()

    def check_action(self, request: Request, who: str) -> None:
        """Refused (403) unless ``request`` is an action this console takes from ``who``."""
        if self.read_only:
            raise Refused(403, "the console is read-only: nothing can be replayed or discarded")
        origin = request.header("origin")
        if origin is not None and origin != request.origin:
            raise Refused(403, "the request comes from another site")
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise Refused(403, "an action is sent as JSON (Content-Type: application/json)")
        sent = (request.header(CSRF_HEADER) or "").encode("utf-8", "replace")
        if not hmac.compare_digest(sent, self.csrf(who).encode("ascii")):
            raise Refused(403, "missing or wrong X-Console-CSRF header: reload the console")
