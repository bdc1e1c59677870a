"""Who may use the console, who they are, and what protects its actions.

Every ``/api/`` request is authenticated: locally by the token ``bus console`` prints (an
``Authorization: Bearer`` header, compared in constant time; a token in the address is
refused, since addresses end up in logs and histories); deployed, by a credential of the
console's own, never a function key (every host key opens every function, and ingress clients
may hold one): its secret (``BUS_CONSOLE_SECRET``, sent in ``X-Console-Secret``, compared in
constant time) or an Entra ID sign-in by App Service authentication, believed only as
``shared.platform_identity`` says. Every action (a POST) must also carry the CSRF
value ``GET /api/session`` gives, a JSON body, and, when the browser sends one, an ``Origin``
that is the console's own; a read-only console refuses them all.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Protocol

from shared.console.http import Request
from shared.console.settings import ENTRA, SECRET, ConsoleSettings
from shared.errors import BusError, ConfigurationError
from shared.platform_identity import (
    NotSignedIn,
    PlatformAuth,
    entra_principal,
    require_platform_sign_in,
)

CSRF_HEADER = "x-console-csrf"
SECRET_HEADER = "x-console-secret"
SECRET_WHO = "console secret"
SECRET_SIGN_IN = "console-secret"
"""What a 401 for the secret says in ``sign_in``: the page shows its sign-in form."""
MAX_WHO_CHARS = 200


class Refused(BusError):
    """A request the console does not serve: ``status`` and why, for its JSON error;
    ``sign_in`` names the credential that would let it through (the page then asks for it)."""

    def __init__(self, status: int, text: str, *, sign_in: str | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.sign_in = sign_in


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


@dataclass(frozen=True, repr=False)
class DeployedIdentity:
    """The deployed console: its own secret when one is set, and with ``entra`` the caller
    App Service authentication signed in with Entra ID (who is then their name and object
    id; otherwise "console secret")."""

    secret: str | None
    entra: bool
    platform: PlatformAuth

    def __call__(self, request: Request) -> str:
        if self.secret is not None and not _same_secret(
            request.header(SECRET_HEADER) or "", self.secret
        ):
            raise Refused(
                401,
                "missing or wrong console secret: sign in with the console's secret",
                sign_in=SECRET_SIGN_IN,
            )
        if not self.entra:
            return SECRET_WHO
        try:
            principal = entra_principal(self.platform, request.headers)
        except NotSignedIn as e:
            raise Refused(401, f"{e}: the console needs an Entra ID sign-in in front") from None
        return principal.described()


def _same_secret(sent: str, secret: str) -> bool:
    """Compared as SHA-256 digests, in constant time: neither the secret's characters nor its
    length show in how long a wrong guess takes."""
    given = hashlib.sha256(sent.strip().encode("utf-8", "replace")).digest()
    return hmac.compare_digest(given, hashlib.sha256(secret.encode("utf-8")).digest())


def deployed_identity(settings: ConsoleSettings, platform: PlatformAuth) -> DeployedIdentity:
    """How the deployed console knows its operator; a ConfigurationError naming the settings
    when it would know them by nothing an ingress client lacks."""
    if settings.identity == ENTRA:
        require_platform_sign_in(platform, "BUS_CONSOLE_IDENTITY=entra")
    elif settings.identity == SECRET and settings.secret is None:
        raise ConfigurationError(
            "the console (BUS_CONSOLE_ENABLED) needs a credential no ingress client holds "
            "(a function key will not do: every host key opens every function): set "
            "BUS_CONSOLE_SECRET (at least 32 random characters, or a Key Vault reference), or "
            "BUS_CONSOLE_IDENTITY=entra behind App Service authentication with Entra ID"
        )
    return DeployedIdentity(settings.secret, settings.identity == ENTRA, platform)


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
