"""App settings: one resolver for every process, and the storage connection read the way
Azure Functions reads it.

``resolve_settings`` merges the sources in the order of ``PRECEDENCE``, documented in
docs/settings.md, "Where settings come from". The CLI, the function app's worker, the local
host, the audit, the bulk jobs and the demo all read settings through it. The storage
connection is taken whole from one source, or refused as ambiguous
(``shared.connection_sources``).

One setting name (``AzureWebJobsStorage`` by default) either holds a connection string, or
``UseDevelopmentStorage=true`` for the local emulator, or is split into identity-based
``<name>__blobServiceUri`` / ``__queueServiceUri`` / ``__tableServiceUri`` (or
``<name>__accountName``) settings, used with an Azure AD credential and no keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from shared import app_settings
from shared.connection_sources import (
    COMMAND_LINE,
    DEFAULTS,
    ENVIRONMENT,
    ConnectionSource,
    Layer,
    connection_source,
)
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
    ``POST /api/messages``, all its storage calls included. Each is the app setting named
    beside it (``shared.app_settings``)."""

    connect: float = 3.0  # BUS_STORAGE_CONNECT_TIMEOUT
    read: float = 5.0  # BUS_STORAGE_READ_TIMEOUT
    call: float = 8.0  # BUS_STORAGE_CALL_TIMEOUT
    ingress: float = 12.0  # BUS_INGRESS_TIMEOUT


def load_storage_timeouts(
    environ: Mapping[str, str], origins: Mapping[str, str] | None = None
) -> StorageTimeouts:
    """The timeouts set in ``environ``, the defaults for the rest (``shared.app_settings``
    declares them); ``origins`` names where each value came from, for the errors."""

    def value(setting: app_settings.Setting[float]) -> float:
        return app_settings.read(setting, environ, (origins or {}).get(setting.name))

    timeouts = StorageTimeouts(
        connect=value(app_settings.CONNECT_TIMEOUT),
        read=value(app_settings.READ_TIMEOUT),
        call=value(app_settings.CALL_TIMEOUT),
        ingress=value(app_settings.INGRESS_TIMEOUT),
    )
    if max(timeouts.connect, timeouts.read) > timeouts.call or timeouts.call > timeouts.ingress:
        raise ConfigurationError(
            "storage timeouts must nest: BUS_STORAGE_CONNECT_TIMEOUT and "
            "BUS_STORAGE_READ_TIMEOUT <= BUS_STORAGE_CALL_TIMEOUT <= BUS_INGRESS_TIMEOUT, got "
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
    source: ConnectionSource | None = None
    """The setting and source the connection was read from (None: built by the caller)."""

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
    for number, item in enumerate(value.split(";"), 1):
        item = item.strip()
        if not item:
            continue
        key, sep, val = item.partition("=")
        if not sep:
            # Not quoted: a part without '=' may be a key split off by a stray ';'.
            raise ConfigurationError(
                f"malformed connection string: part {number} has no '=' (the value is not "
                "shown: it may hold a key)"
            )
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


# --- The one settings resolver -------------------------------------------------------------

STORAGE_SETTING_NAME = "BUS_STORAGE_SETTING"
"""App setting naming the connection setting to use (default ``AzureWebJobsStorage``)."""
STATE_STORAGE_SETTING_NAME = "BUS_STATE_STORAGE_SETTING"
"""App setting naming the state account's connection setting (default: the messaging one,
``BUS_STORAGE_SETTING``'s)."""
LOCAL_SETTINGS_FILE = Path("local.settings.json")

PRECEDENCE = (COMMAND_LINE, ENVIRONMENT, "local.settings.json Values", DEFAULTS)
"""Where a setting is looked up, first match wins (docs/settings.md, "Where settings come
from")."""

DEFAULT_VALUES: dict[str, str] = {
    STORAGE_SETTING_NAME: DEFAULT_SETTING,
}


def load_local_settings(path: Path) -> dict[str, str]:
    """The ``Values`` of a local.settings.json (absent file: no values)."""
    if not path.exists():
        return {}
    try:
        values = json.loads(path.read_text()).get("Values", {})
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigurationError(f"cannot read {path}: {e}") from e
    if not isinstance(values, dict):
        raise ConfigurationError(f"{path}: 'Values' must be an object")
    return {str(k): str(v) for k, v in values.items()}


@dataclass(frozen=True)
class Settings:
    """Every app setting of one process, resolved once, with where each value came from.

    The CLI, the function app's worker, the local host, the audit and the demo all read
    their settings through ``resolve_settings``, so one name means one value everywhere."""

    values: Mapping[str, str]
    origins: Mapping[str, str]
    sources: tuple[str, ...] = (COMMAND_LINE, ENVIRONMENT)
    """The sources consulted, highest precedence first (for messages)."""
    layers: tuple[Layer, ...] = ()
    """Each source's own values, highest precedence first: the storage connection is taken
    whole from one of them (``shared.connection_sources``)."""

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self.values.get(name, "")
        return value if value.strip() else default

    def origin(self, name: str) -> str:
        """Where ``name`` was found ('command line', 'environment', the settings file's path,
        'defaults') or 'unset'."""
        return self.origins.get(name, "unset")

    @property
    def storage_setting(self) -> str:
        """The connection setting's name (``BUS_STORAGE_SETTING``, or a ``--setting``)."""
        return self.get(STORAGE_SETTING_NAME) or DEFAULT_SETTING

    def configures(self, connection: str) -> bool:
        """Whether any source sets ``connection`` or one of its ``<name>__*`` parts."""
        prefix = f"{connection}__"
        return any(
            (name == connection or name.startswith(prefix)) and value.strip()
            for name, value in self.values.items()
        )

    @property
    def state_storage_setting(self) -> str:
        """The state account's connection setting (``BUS_STATE_STORAGE_SETTING``); unset, the
        messaging one, so that a single app keeps one account."""
        return self.get(STATE_STORAGE_SETTING_NAME) or self.storage_setting

    @property
    def separate_state(self) -> bool:
        """Whether the state account has a connection of its own (not the messaging one)."""
        return self.state_storage_setting != self.storage_setting

    def storage(self) -> StorageSettings:
        """The messaging account, from the connection setting ``storage_setting``."""
        return self.connection(self.storage_setting, STORAGE_SETTING_NAME)

    def state_storage(self) -> StorageSettings:
        """The state account, from the connection setting ``state_storage_setting``."""
        if not self.separate_state:
            return self.storage()
        return self.connection(self.state_storage_setting, STATE_STORAGE_SETTING_NAME)

    def connection(self, name: str, named_by_setting: str) -> StorageSettings:
        """A storage account from connection setting ``name`` (which the app setting
        ``named_by_setting`` names), with the source it came from. Nothing falls back to the
        emulator: a connection setting that no source sets is an error naming it and where it
        was looked for; one whose settings are ambiguous is refused
        (``shared.connection_sources``)."""
        if not self.configures(name):
            named_by = self.origin(named_by_setting)
            if named_by_setting != STORAGE_SETTING_NAME:
                named_by = f"{named_by_setting} from the {named_by}"
            searched = " or ".join(s for s in self.sources if s != DEFAULTS)
            raise ConfigurationError(
                f"connection setting {name} (named by the {named_by}) is not set: neither "
                f"{name} nor {name}__accountName / {name}__*ServiceUri was found in the "
                f"{searched}; for the local emulator set "
                f"{name}=UseDevelopmentStorage=true (cp local.settings.sample.json "
                "local.settings.json)"
            )
        source = connection_source(self.layers or ((ENVIRONMENT, self.values),), name)
        return replace(load_storage_settings(self.values, name), source=source)


def resolve_settings(
    options: Mapping[str, str | None] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    local_file: Path | None = LOCAL_SETTINGS_FILE,
    system_app: Layer | None = None,
) -> Settings:
    """Merge the sources in the order of ``PRECEDENCE``. ``options`` are command-line values
    by setting name (None: the option was not given); ``local_file`` None reads no file. A value
    from the file has the file's path as its origin. ``system_app``: one app's settings from a
    system file (``shared.system``), over the environment, so that a tool run over a system
    sees each app as that app's own host would."""
    layers: list[Layer] = [
        (COMMAND_LINE, {k: v for k, v in (options or {}).items() if v is not None}),
        *([system_app] if system_app is not None else []),
        (ENVIRONMENT, dict(os.environ if environ is None else environ)),
    ]
    if local_file is not None:
        layers.append((str(local_file), load_local_settings(local_file)))
    layers.append((DEFAULTS, DEFAULT_VALUES))
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    for origin, layer in reversed(layers):
        for name, value in layer.items():
            if value.strip() or name not in values:
                values[name] = value
                origins[name] = origin
    return Settings(values, origins, tuple(origin for origin, _ in layers), tuple(layers))
