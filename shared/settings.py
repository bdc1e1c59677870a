"""Storage connection settings, read the way Azure Functions reads them.

One setting name (``AzureWebJobsStorage`` by default) either holds a connection string, or
``UseDevelopmentStorage=true`` for the local emulator, or is split into identity-based
``<name>__blobServiceUri`` / ``__queueServiceUri`` / ``__tableServiceUri`` (or
``<name>__accountName``) settings, used with an Azure AD credential and no keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.errors import ConfigurationError

DEFAULT_SETTING = "AzureWebJobsStorage"

# The emulator's published, well-known development account; not a secret.
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEV_CONNECTION_STRING = (
    "DefaultEndpointsProtocol=http;"
    f"AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
    f"BlobEndpoint=http://127.0.0.1:10000/{DEV_ACCOUNT};"
    f"QueueEndpoint=http://127.0.0.1:10001/{DEV_ACCOUNT};"
    f"TableEndpoint=http://127.0.0.1:10002/{DEV_ACCOUNT};"
)


@dataclass(frozen=True)
class StorageTimeouts:
    """How long storage may stay silent, in seconds: a frozen account must end a request
    (503 at the ingress) or a poll (the queue worker backs off), never hang it.

    ``connect`` and ``read`` bound each HTTP attempt (``read`` is silence on the socket);
    ``call`` bounds one store call, the SDK's retries included; ``ingress`` bounds one
    ``POST /api/messages``, all its storage calls included. Each is read from the environment
    variable named beside it."""

    connect: float = 3.0  # BUS_STORAGE_CONNECT_TIMEOUT
    read: float = 5.0  # BUS_STORAGE_READ_TIMEOUT
    call: float = 8.0  # BUS_STORAGE_CALL_TIMEOUT
    ingress: float = 12.0  # BUS_INGRESS_TIMEOUT


_TIMEOUT_VARIABLES = {
    "connect": "BUS_STORAGE_CONNECT_TIMEOUT",
    "read": "BUS_STORAGE_READ_TIMEOUT",
    "call": "BUS_STORAGE_CALL_TIMEOUT",
    "ingress": "BUS_INGRESS_TIMEOUT",
}


def load_storage_timeouts(environ: Mapping[str, str]) -> StorageTimeouts:
    """The timeouts set in ``environ``, the defaults for the rest."""
    values: dict[str, float] = {}
    for name, variable in _TIMEOUT_VARIABLES.items():
        text = environ.get(variable, "").strip()
        if not text:
            continue
        try:
            values[name] = float(text)
        except ValueError:
            raise ConfigurationError(
                f"{variable} must be a number of seconds, got {text!r}"
            ) from None
        if not (math.isfinite(values[name]) and values[name] > 0):
            raise ConfigurationError(f"{variable} must be a positive number of seconds")
    timeouts = StorageTimeouts(**values)
    if max(timeouts.connect, timeouts.read) > timeouts.call or timeouts.call > timeouts.ingress:
        raise ConfigurationError(
            "storage timeouts must nest: connect and read <= call <= ingress, got "
            f"{timeouts.connect:g}, {timeouts.read:g}, {timeouts.call:g}, {timeouts.ingress:g}"
        )
    return timeouts


@dataclass(frozen=True)
class StorageSettings:
    """Where the account is and how to authenticate.

    Exactly one of ``connection_string`` or the three service URIs is used; with URIs the
    credential is DefaultAzureCredential, or a user-assigned managed identity when
    ``client_id`` is set (``<name>__credential=managedidentity`` + ``<name>__clientId``).
    """

    connection_string: str | None = None
    blob_service_uri: str | None = None
    queue_service_uri: str | None = None
    table_service_uri: str | None = None
    client_id: str | None = None
    managed_identity: bool = False
    timeouts: StorageTimeouts = field(default_factory=StorageTimeouts)

    @property
    def uses_identity(self) -> bool:
        return self.connection_string is None

    def describe(self) -> str:
        """A log-safe description (never prints keys)."""
        if self.connection_string is not None:
            parts = parse_connection_string(self.connection_string)
            return f"connection string for account {parts.get('AccountName', '?')}"
        return f"identity-based access to {self.blob_service_uri}"


def parse_connection_string(value: str) -> dict[str, str]:
    """Split ``Key=Value;...`` into a dict; values may contain '=' (base64 keys)."""
    parts: dict[str, str] = {}
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        key, sep, val = item.partition("=")
        if not sep:
            raise ConfigurationError(f"malformed connection string part {key!r} (no '=')")
        parts[key.strip()] = val.strip()
    return parts


def load_storage_settings(
    environ: Mapping[str, str], setting: str = DEFAULT_SETTING
) -> StorageSettings:
    """Read the settings for connection ``setting`` from ``environ`` (usually os.environ)."""
    value = environ.get(setting, "").strip()
    if value:
        parts = parse_connection_string(value)
        if parts.get("UseDevelopmentStorage", "").lower() == "true":
            return StorageSettings(DEV_CONNECTION_STRING, timeouts=load_storage_timeouts(environ))
        if not ("AccountName" in parts or "BlobEndpoint" in parts):
            raise ConfigurationError(
                f"setting {setting} is not a storage connection string "
                "(expected AccountName=... or UseDevelopmentStorage=true)"
            )
        return StorageSettings(connection_string=value, timeouts=load_storage_timeouts(environ))

    def sub(name: str) -> str | None:
        found = environ.get(f"{setting}__{name}", "").strip()
        return found or None

    account = sub("accountName")
    uris = {
        kind: sub(f"{kind}ServiceUri")
        or (f"https://{account}.{kind}.core.windows.net" if account else None)
        for kind in ("blob", "queue", "table")
    }
    missing = [kind for kind, uri in uris.items() if uri is None]
    if missing:
        raise ConfigurationError(
            f"no storage connection configured: set {setting} to a connection string or "
            f"'UseDevelopmentStorage=true', or set {setting}__accountName, or all of "
            + ", ".join(f"{setting}__{k}ServiceUri" for k in ("blob", "queue", "table"))
            + f" (missing: {', '.join(missing)})"
        )
    credential = (sub("credential") or "").lower()
    if credential not in ("", "managedidentity"):
        raise ConfigurationError(
            f"{setting}__credential must be 'managedidentity' or unset, got {credential!r}"
        )
    return StorageSettings(
        blob_service_uri=uris["blob"],
        queue_service_uri=uris["queue"],
        table_service_uri=uris["table"],
        client_id=sub("clientId"),
        managed_identity=credential == "managedidentity",
        timeouts=load_storage_timeouts(environ),
    )
