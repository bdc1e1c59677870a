"""Who App Service authentication says a request comes from, and when that can be believed.

With App Service authentication ("Easy Auth") on, the platform checks a caller's sign-in
before the Functions host sees the request, strips any ``X-MS-CLIENT-PRINCIPAL-*`` header the
caller sent and sets its own: the object id, the name and the identity provider (``aad`` for
Microsoft Entra ID). With it off, those headers are whatever the caller wrote. The platform
says it is on by setting ``WEBSITE_AUTH_ENABLED=True`` in the app's environment, read once at
start-up into ``AppConfig.platform`` (``shared.config``); nothing here reads the environment.

The console (``BUS_CONSOLE_IDENTITY=entra``) and the HTTP ingress
(``BUS_INGRESS_ENTRA_CALLERS``) trust the headers only through ``entra_principal``: App
Service authentication on, the provider Entra's, an object id shaped as one. Start-up refuses
either option without the platform's authentication (``require_platform_sign_in``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from shared.errors import BusError, ConfigurationError

PRINCIPAL_ID = "X-MS-CLIENT-PRINCIPAL-ID"
PRINCIPAL_NAME = "X-MS-CLIENT-PRINCIPAL-NAME"
PRINCIPAL_IDP = "X-MS-CLIENT-PRINCIPAL-IDP"
ENTRA_IDP = "aad"
"""What the platform sends in X-MS-CLIENT-PRINCIPAL-IDP for a Microsoft Entra ID sign-in."""
AUTH_ENABLED_SETTING = "WEBSITE_AUTH_ENABLED"
OBJECT_ID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
MAX_NAME_CHARS = 150
"""Of a signed-in name as recorded: room for the object id beside it in the journal's 200."""


@dataclass(frozen=True)
class PlatformAuth:
    """App Service authentication as the platform reported it at start-up."""

    enabled: bool = False
    """WEBSITE_AUTH_ENABLED: the platform signs callers in and owns the principal headers."""
    default_provider: str | None = None
    """WEBSITE_AUTH_DEFAULT_PROVIDER: where an unauthenticated browser is sent to sign in
    (shown in errors; which provider signed a request in is its IdP header)."""


@dataclass(frozen=True)
class Principal:
    """A caller App Service authentication signed in with Entra ID."""

    object_id: str
    """Lower case: the same caller whatever case the header used."""
    name: str

    def described(self) -> str:
        """Who acted as a person reads it and as the journal records it: the name with the
        object id beside it (a name can be reused or changed, the object id cannot)."""
        name = self.name[:MAX_NAME_CHARS] or "(no name)"
        return f"{name} (object id {self.object_id})"


class NotSignedIn(BusError):
    """The request carries no Entra sign-in the platform vouches for (HTTP 401)."""


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def entra_principal(platform: PlatformAuth, headers: Mapping[str, str]) -> Principal:
    """The Entra caller the platform names in ``headers``; NotSignedIn, saying why, when App
    Service authentication is off (the headers are then the caller's own words), when another
    identity provider signed the caller in, or when no object id is given."""
    if not platform.enabled:
        raise NotSignedIn(
            f"App Service authentication is off ({AUTH_ENABLED_SETTING} is not True): no "
            "X-MS-CLIENT-PRINCIPAL-* header is believed"
        )
    provider = (_header(headers, PRINCIPAL_IDP) or "").strip().lower()
    if provider != ENTRA_IDP:
        raise NotSignedIn(
            f"not signed in with Microsoft Entra ID ({PRINCIPAL_IDP} is not {ENTRA_IDP!r})"
        )
    object_id = (_header(headers, PRINCIPAL_ID) or "").strip()
    if not OBJECT_ID.fullmatch(object_id):
        raise NotSignedIn(f"no caller object id ({PRINCIPAL_ID}) from the platform's sign-in")
    name = (_header(headers, PRINCIPAL_NAME) or "").strip()
    return Principal(object_id.lower(), name)


def require_platform_sign_in(platform: PlatformAuth, setting: str) -> None:
    """A ConfigurationError naming ``setting`` (an option that trusts the principal headers)
    unless App Service authentication is on: without it any caller could name itself."""
    if not platform.enabled:
        raise ConfigurationError(
            f"{setting} trusts the caller named by App Service authentication, which is off "
            f"in this app ({AUTH_ENABLED_SETTING} is not True, so X-MS-CLIENT-PRINCIPAL-* "
            "headers would be whatever a caller sends): turn App Service authentication on "
            f"with Microsoft Entra ID (Bicep: entraAuthEnabled), or unset {setting}"
        )
