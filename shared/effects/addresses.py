"""Where the declared services live and how the bus authenticates to them: app settings
``BUS_SERVICE_<NAME>_URL`` and ``BUS_SERVICE_<NAME>_CREDENTIAL``, read once at start-up
(``shared.config``), never a message's content (``docs/effects.md``, section 7).

A base address is checked before anything is sent to it: http or https only, a host, no user
information (a password in a URL ends up in logs), no query or fragment (the operation's path
is appended to it); plain http only to this machine, since the credential and the bodies
would cross a network in clear. A credential is held in ``Credential``, whose text never
shows it, and is sent only in the Authorization header.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from shared.bus.retries import RetryPolicy
from shared.errors import ConfigurationError
from shared.host_json import DEFAULT_FUNCTION_TIMEOUT
from shared.settings import StorageTimeouts

SETTING_PREFIX = "BUS_SERVICE_"
URL_SUFFIX = "_URL"
CREDENTIAL_SUFFIX = "_CREDENTIAL"
KEY_VAULT_REFERENCE = "@Microsoft.KeyVault("
"""What an app setting's value still starts with when the platform could not resolve the Key
Vault reference it holds (no access to the vault, a wrong secret URI)."""
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
STORAGE_CALLS_PER_RECEIVE = 8
"""The storage calls one receive makes one after another besides its handler (token read,
state read, O(m) insert, claim, answer token, commit, signal, token delete): the part of the
invocation's time a provider call must leave to them, each bounded by the storage call
timeout."""

_SETTING = re.compile(
    rf"{SETTING_PREFIX}(?P<name>[A-Z0-9_]+?)(?P<kind>{URL_SUFFIX}|{CREDENTIAL_SUFFIX})"
)


@dataclass(frozen=True, repr=False)
class Credential:
    """A service's secret. Its ``str`` and ``repr`` never show it: it may reach a log line
    or an error text through any object that holds it; only ``authorization`` reads it."""

    _secret: str = field(repr=False)

    def authorization(self) -> str:
        """The Authorization header's value."""
        return f"Bearer {self._secret}"

    def __str__(self) -> str:
        return "Credential(hidden)"

    __repr__ = __str__


@dataclass(frozen=True)
class ServiceAddress:
    """A service's base address (no trailing '/') and its credential (None: none sent)."""

    url: str
    credential: Credential | None = None


@dataclass(frozen=True)
class EffectSettings:
    """The effect settings of one app: every service address the settings name (by the NAME
    of their settings), the answer size limit, and the cap on a call's timeout."""

    addresses: Mapping[str, ServiceAddress] = field(default_factory=dict)
    answer_max_bytes: int = 65536
    call_cap_seconds: float = field(
        default_factory=lambda: call_cap(DEFAULT_FUNCTION_TIMEOUT, StorageTimeouts().call)
    )
    """``call_cap`` of the host's functionTimeout and the storage call timeout."""
    retries: int = 8
    """BUS_EFFECT_RETRIES: delayed retries of a call whose outcome is unknown."""

    def retry_policy(self) -> RetryPolicy:
        """The performer's retries: 10 s, tripling, at most an hour apart, none at once (a
        provider that just failed rarely recovers within the same invocation)."""
        return RetryPolicy.exponential(
            immediate=0, first=10.0, factor=3.0, count=self.retries, cap=3600.0
        )

    def address_of(self, service: str) -> ServiceAddress:
        """The address of the declared ``service``; a ConfigurationError naming the setting
        when none is set."""
        found = self.addresses.get(setting_name(service))
        if found is None:
            raise ConfigurationError(
                f"the app declares service {service}: set the app setting "
                f"{url_setting(service)} to its base address (docs/effects.md)"
            )
        return found


def setting_name(service: str) -> str:
    """The NAME of ``service``'s settings: its name upper-cased, '-' as '_'."""
    return service.upper().replace("-", "_")


def url_setting(service: str) -> str:
    return f"{SETTING_PREFIX}{setting_name(service)}{URL_SUFFIX}"


def credential_setting(service: str) -> str:
    return f"{SETTING_PREFIX}{setting_name(service)}{CREDENTIAL_SUFFIX}"


def call_cap(function_timeout: float, storage_call_timeout: float) -> float:
    """The longest a provider call may take: what one invocation may run (host.json's
    functionTimeout, during which the host keeps renewing the queue message's lease) less
    the storage calls of the receive around it, so that a slow provider ends in a retry with
    the same key, never in an invocation the host kills with the message still leased.
    Infinite for an unbounded functionTimeout; at most 0 when the two leave no time."""
    if math.isinf(function_timeout):
        return math.inf
    return function_timeout - STORAGE_CALLS_PER_RECEIVE * storage_call_timeout


def read_addresses(
    values: Mapping[str, str], origin: Mapping[str, str]
) -> dict[str, ServiceAddress]:
    """Every service address the settings ``values`` name, by NAME, checked; ``origin``
    says where each setting came from. A credential without its URL is ignored (the service
    may be declared by another app sharing the settings)."""
    urls: dict[str, str] = {}
    credentials: dict[str, Credential] = {}
    for setting, raw in values.items():
        matched = _SETTING.fullmatch(setting)
        value = raw.strip()
        if matched is None or not value:
            continue
        where = f"app setting {setting} (from the {origin.get(setting, 'settings')})"
        if value.startswith(KEY_VAULT_REFERENCE):
            raise ConfigurationError(
                f"{where} is a Key Vault reference the platform did not resolve: give the "
                "app's managed identity permission to get the vault's secrets and check the "
                "SecretUri (the value is not shown)"
            )
        if matched["kind"] == URL_SUFFIX:
            urls[matched["name"]] = checked_url(value, where)
        else:
            credentials[matched["name"]] = Credential(value)
    return {name: ServiceAddress(url, credentials.get(name)) for name, url in urls.items()}


def checked_url(value: str, where: str) -> str:
    """``value`` as a base address (no trailing '/'), or a ConfigurationError saying what is
    wrong with it. The value is never quoted: a refused one may hold a password."""
    problem = url_problem(value)
    if problem is not None:
        raise ConfigurationError(
            f"{where} is not accepted: {problem} (the value is not shown: it may hold a secret)"
        )
    return value.rstrip("/")


def url_problem(value: str) -> str | None:
    if not value.isascii() or not value.isprintable() or " " in value:
        return "it holds spaces, control or non-ASCII characters"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return "it is not a URL"
    if parts.scheme not in ("http", "https"):
        return "it must start with https:// (or http:// to this machine)"
    if not parts.hostname:
        return "it names no host"
    if "@" in parts.netloc:
        return "it holds user information: set the credential in its own setting"
    if "?" in value or "#" in value:
        return "it holds a query or a fragment: give the base address only"
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        return (
            "plain http is accepted only to localhost, 127.0.0.1 or ::1: the credential and "
            "the bodies would cross the network in clear"
        )
    return None
