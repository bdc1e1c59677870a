"""The app's configuration: one frozen object, built once at start-up.

``build_config`` reads every app setting declared in ``shared.app_settings`` from the resolved
``Settings`` (``shared.settings.resolve_settings``; the order of the sources is in
docs/settings.md, "Where settings come from") and host.json from the app's root folder, and
checks them all: a bad value stops start-up with a ``ConfigurationError`` naming the
setting, where its value came from and what it accepts. After that nothing reads the
environment: the function app's worker, the HTTP ingress, the timer's cleanup and ``bus``
take what they need from the ``AppConfig`` (OpenTelemetry's own ``OTEL_*`` variables aside,
``shared.observability``).

host.json is found in one place, the app's root folder: the folder of ``function_app.py`` for
the function app (it passes its folder to ``shared.runtime.worker``), the current folder for
``bus`` and the other tools (where ``local.settings.json`` is read too). Without a host.json
there the queue settings are the Functions host's defaults.

``python -m shared.config`` prints the settings table of docs/settings.md.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from shared import app_settings as s
from shared.bus.config import BusConfig
from shared.bus.state.connection import PostgresSettings, url_problem
from shared.cleanup.settings import CleanupSettings
from shared.console.settings import ConsoleSettings
from shared.effects.addresses import (
    KEY_VAULT_REFERENCE,
    EffectSettings,
    call_cap,
    read_addresses,
)
from shared.errors import ConfigurationError
from shared.host_json import QueueSettings, function_timeout
from shared.platform_identity import PlatformAuth
from shared.resources import (
    SHARED_CONTAINERS,
    app_containers,
    app_name_of,
    app_tables,
    performer_endpoint,
)
from shared.settings import (
    Settings,
    StorageSettings,
    StorageTimeouts,
    load_storage_timeouts,
    resolve_settings,
)
from shared.stores.cosmos.settings import CosmosSettings

HOST_JSON = "host.json"


def host_json_path(root: Path | None = None) -> Path:
    """Where the app's host.json is: in ``root``, the app's folder (default: the current
    folder)."""
    return (root or Path.cwd()) / HOST_JSON


@dataclass(frozen=True)
class AppConfig:
    """Everything the app is configured with, checked, from ``build_config``."""

    settings: Settings
    """The resolved settings (the app reference and the connection's name are read from here
    by ``shared.app_loader`` and the bindings)."""
    storage: StorageSettings | None
    """The messaging account, None when no source sets the connection (``require_storage``
    says so to a command that needs it)."""
    state_storage: StorageSettings | None
    """The state account when ``BUS_STATE_STORAGE_SETTING`` names a connection of its own
    (``settings.separate_state``), else the messaging account's settings."""
    timeouts: StorageTimeouts
    postgres: PostgresSettings
    cosmos: CosmosSettings
    """The Cosmos DB account of ``store="cosmos"`` endpoints (``BUS_COSMOS_*``)."""
    app_name: str | None
    """The app's name (``BUS_APP_NAME``, else ``BusApp.name``; None: an unnamed app), after
    which its own tables, containers and performer are named (``shared.resources``)."""
    cleanup: CleanupSettings
    queues: QueueSettings
    """host.json's ``extensions.queues``: maxDequeueCount, batch sizes, visibility timeout."""
    host_json: Path | None
    """The host.json read (None: none was found, the Functions host's defaults apply)."""
    auto_subscribe: bool
    """Subscribe the endpoints on the app's first invocation (``shared.startup_subscription``)."""
    bus: BusConfig
    """The bus's tunables from the app settings, the shared resource names and host.json's
    maxDequeueCount; clock, ids and telemetry providers keep BusConfig's defaults."""
    effects: EffectSettings
    """The declared services' addresses and credentials (``BUS_SERVICE_<NAME>_*``), the
    answer size limit and the cap on a call's timeout (``shared.effects.addresses``)."""
    console: ConsoleSettings
    """The operator console's ``BUS_CONSOLE_*`` settings (``shared.console``)."""
    platform: PlatformAuth
    """App Service authentication as the platform set it (``WEBSITE_AUTH_*``): whether its
    principal headers can be believed (``shared.platform_identity``)."""

    def require_storage(self) -> StorageSettings:
        """The storage settings; a ConfigurationError naming the connection setting and where
        it was looked for when none is set."""
        if self.storage is None:
            return self.settings.storage()  # raises, saying what is missing
        return self.storage

    def require_state_storage(self) -> StorageSettings:
        """The state account's settings (the messaging account's when it has no connection of
        its own), refused as ``require_storage`` refuses."""
        if not self.settings.separate_state:
            return self.require_storage()
        if self.state_storage is None:
            return self.settings.state_storage()  # raises, saying what is missing
        return self.state_storage


def _value(settings: Settings, setting: s.Setting[s.T]) -> s.T:
    return s.read(setting, settings.values, settings.origin(setting.name))


def _postgres(settings: Settings) -> PostgresSettings:
    url = _value(settings, s.POSTGRES_URL)
    prefix = f"{s.POSTGRES_URL.name}_"
    overrides = {
        name[len(prefix) :]: value.strip()
        for name, value in settings.values.items()
        if name.startswith(prefix) and value.strip()
    }
    for name, value in {s.POSTGRES_URL.name: url, **overrides}.items():
        problem = None if value is None else url_problem(value)
        if problem is not None:
            setting = name if name == s.POSTGRES_URL.name else prefix + name
            raise ConfigurationError(
                f"app setting {setting} (from the {settings.origin(setting)}) is not accepted: "
                f"{problem}; it must be {s.POSTGRES_URL.accepts} (the value is not shown: it "
                "may hold a password)"
            )
    return PostgresSettings(
        url=url,
        endpoint_urls=overrides,
        entra=_value(settings, s.POSTGRES_ENTRA),
        pool_size=_value(settings, s.POSTGRES_POOL_SIZE),
    )


def _cosmos(settings: Settings) -> CosmosSettings:
    """BUS_COSMOS_*, checked; the key is never quoted in an error."""
    endpoint = _value(settings, s.COSMOS_ENDPOINT)
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme != "https" or not parts.hostname or parts.username or parts.query:
            raise ConfigurationError(
                f"app setting {s.COSMOS_ENDPOINT.name}={endpoint[:80]!r} (from the "
                f"{settings.origin(s.COSMOS_ENDPOINT.name)}) is not accepted: it must be "
                f"{s.COSMOS_ENDPOINT.accepts}"
            )
    key = _value(settings, s.COSMOS_KEY)
    if key is not None and not _is_base64(key):
        raise ConfigurationError(
            f"app setting {s.COSMOS_KEY.name} (from the {settings.origin(s.COSMOS_KEY.name)}) "
            f"is not accepted: it must be {s.COSMOS_KEY.accepts} (the value is not shown)"
        )
    database = _value(settings, s.COSMOS_DATABASE) or s.COSMOS_DATABASE.default or "bus"
    if set(database) & set("/\\#?") or len(database) > 255:
        raise ConfigurationError(
            f"app setting {s.COSMOS_DATABASE.name}={database[:80]!r} is not accepted: it "
            f"must be {s.COSMOS_DATABASE.accepts}"
        )
    return CosmosSettings(endpoint=endpoint, key=key, database=database)


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


def _cleanup(settings: Settings, app_name: str | None) -> CleanupSettings:
    return CleanupSettings(
        grace_seconds=_value(settings, s.CLEANUP_GRACE),
        budget_seconds=_value(settings, s.CLEANUP_BUDGET),
        page_size=_value(settings, s.CLEANUP_PAGE_SIZE),
        concurrency=_value(settings, s.CLEANUP_CONCURRENCY),
        lease_seconds=_value(settings, s.CLEANUP_LEASE),
        audit_retention_seconds=_value(settings, s.CLEANUP_AUDIT_RETENTION),
        poison_expiry_margin_seconds=_value(settings, s.CLEANUP_POISON_EXPIRY_MARGIN),
        backlog_max_tokens=_value(settings, s.CLEANUP_BACKLOG_MAX_TOKENS),
        checkpoint_table=app_tables(app_name)["cleanup"],
    )


def _bus(settings: Settings, queues: QueueSettings, app_name: str | None) -> BusConfig:
    tables, containers = app_tables(app_name), app_containers(app_name)
    return BusConfig(
        tokens_container=SHARED_CONTAINERS["tokens"],
        topics_container=SHARED_CONTAINERS["topics"],
        parked_container=SHARED_CONTAINERS["parked"],
        payloads_container=SHARED_CONTAINERS["payloads"],
        ingress_table=tables["ingress"],
        actions_table=tables["actions"],
        discarded_container=containers["discarded"],
        audits_container=containers["audits"],
        performer_endpoint=performer_endpoint(app_name),
        discard_retention_seconds=_value(settings, s.DISCARD_RETENTION),
        shared_payload_min_chars=_value(settings, s.SHARED_PAYLOAD_MIN_CHARS),
        max_dequeue_count=queues.max_dequeue_count,
        ingress_window_seconds=_value(settings, s.INGRESS_WINDOW),
        session_resend_seconds=_value(settings, s.SESSION_RESEND),
        saga_retention_seconds=_value(settings, s.SAGA_RETENTION),
        ingress_key_scopes=_value(settings, s.INGRESS_KEY_SCOPES),
        wire_format=_value(settings, s.WIRE_FORMAT),
        ingress_entra_callers=_value(settings, s.INGRESS_ENTRA_CALLERS),
        processed_retention_seconds=_value(settings, s.PROCESSED_RETENTION),
        state_stream_retention_seconds=_value(settings, s.STATE_STREAM_RETENTION),
        entity_outbox_retention_seconds=_value(settings, s.ENTITY_OUTBOX_RETENTION),
        max_payload_bytes=_value(settings, s.MAX_PAYLOAD),
        body_budget_bytes=_body_budget(settings),
        body_budget_wait_seconds=_value(settings, s.BODY_BUDGET_WAIT),
        state_wait_max_seconds=_value(settings, s.STATE_WAIT),
        http_concurrency=_value(settings, s.HTTP_CONCURRENCY),
        max_outputs=_value(settings, s.MAX_OUTPUTS),
        max_deliveries=_value(settings, s.MAX_DELIVERIES),
        send_concurrency=_value(settings, s.SEND_CONCURRENCY),
        max_conflict_rounds=_value(settings, s.MAX_CONFLICT_ROUNDS),
        give_back_seconds=_value(settings, s.GIVE_BACK),
    )


def _body_budget(settings: Settings) -> int:
    """BUS_BODY_BUDGET_BYTES, refused below BUS_MAX_PAYLOAD_BYTES: a budget without room for
    one body of the largest size would give such a message back for ever."""
    budget = _value(settings, s.BODY_BUDGET)
    largest = _value(settings, s.MAX_PAYLOAD)
    if budget and budget < largest:
        raise ConfigurationError(
            f"app setting {s.BODY_BUDGET.name}={budget} is below {s.MAX_PAYLOAD.name}="
            f"{largest}: the budget must hold at least one body of the largest size (0 "
            "takes four)"
        )
    return budget


def _effects(
    settings: Settings, timeouts: StorageTimeouts, host_json: Path | None
) -> EffectSettings:
    return EffectSettings(
        addresses=read_addresses(settings.values, settings.origins),
        answer_max_bytes=_value(settings, s.EFFECT_ANSWER_MAX_BYTES),
        retries=_value(settings, s.EFFECT_RETRIES),
        call_cap_seconds=call_cap(function_timeout(host_json), timeouts.call),
    )


def _console(settings: Settings) -> ConsoleSettings:
    return ConsoleSettings(
        enabled=_value(settings, s.CONSOLE_ENABLED),
        read_only=_value(settings, s.CONSOLE_READ_ONLY),
        identity=_value(settings, s.CONSOLE_IDENTITY),
        secret=_console_secret(settings),
        audit_scan_rows=_value(settings, s.CONSOLE_AUDIT_SCAN_ROWS),
        list_limit=_value(settings, s.CONSOLE_LIST_LIMIT),
    )


def _console_secret(settings: Settings) -> str | None:
    """BUS_CONSOLE_SECRET, checked without ever quoting it in an error."""
    secret = _value(settings, s.CONSOLE_SECRET)
    if secret is None:
        return None
    name = s.CONSOLE_SECRET.name
    where = f"app setting {name} (from the {settings.origin(name)})"
    if secret.startswith(KEY_VAULT_REFERENCE):
        raise ConfigurationError(
            f"{where} is a Key Vault reference the platform did not resolve: give the app's "
            "managed identity permission to get the vault's secrets and check the SecretUri "
            "(the value is not shown)"
        )
    if len(secret) < s.CONSOLE_SECRET_MIN_CHARS:
        raise ConfigurationError(
            f"{where} is too short to stand guessing: it must be {s.CONSOLE_SECRET.accepts} "
            "(the value is not shown)"
        )
    return secret


def _platform(settings: Settings) -> PlatformAuth:
    return PlatformAuth(
        enabled=_value(settings, s.AUTH_ENABLED),
        default_provider=_value(settings, s.AUTH_DEFAULT_PROVIDER),
    )


def build_config(
    settings: Settings | None = None, *, root: Path | None = None, app_name: str | None = None
) -> AppConfig:
    """The app's configuration from ``settings`` (default: ``resolve_settings()``) and the
    host.json in ``root`` (default: the current folder), for an app that declares
    ``app_name`` (``BusApp.name``; ``BUS_APP_NAME`` wins over it). Raises ConfigurationError
    on the first bad value, naming it."""
    settings = settings or resolve_settings()
    name = app_name_of(settings.values, app_name, settings.origin(s.APP_NAME.name))
    timeouts = load_storage_timeouts(settings.values, settings.origins)
    storage = None
    if settings.configures(settings.storage_setting):
        storage = settings.storage()
    state_storage = storage
    if settings.separate_state:
        # Named explicitly, so a missing or ambiguous connection is refused now, by name,
        # rather than on the first message.
        state_storage = settings.state_storage()
    path = host_json_path(root)
    found = path.is_file()
    queues = QueueSettings.from_host_json(path) if found else QueueSettings()
    return AppConfig(
        settings=settings,
        storage=storage,
        state_storage=state_storage,
        timeouts=timeouts,
        postgres=_postgres(settings),
        cosmos=_cosmos(settings),
        app_name=name,
        cleanup=_cleanup(settings, name),
        queues=queues,
        host_json=path if found else None,
        auto_subscribe=_value(settings, s.AUTO_SUBSCRIBE),
        bus=_bus(settings, queues, name),
        effects=_effects(settings, timeouts, path if found else None),
        console=_console(settings),
        platform=_platform(settings),
    )


def default_bus_config() -> BusConfig:
    """The bus configuration of an app with no settings and no host.json: the defaults, with
    the shared containers' and tables' names (for tools that only need those names)."""
    return _bus(resolve_settings(environ={}, local_file=None), QueueSettings(), None)


if __name__ == "__main__":
    print(s.markdown_table(), end="")
