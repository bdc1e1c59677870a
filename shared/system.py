"""The system file: the apps of a system of services, for tools that look at them all.

A system file lists the apps that share one messaging account, each with its name, its
``busApp`` (``package.module:attribute``) and its store (``table``, ``blob``, ``postgres`` or
``cosmos``: what the system template deploys for the app, ``store_fault``). It is
either the system template's parameters file (``parameters.apps.value``: so
infra/system.parameters.json is one) or a plain ``{"apps": [...]}``. For tools run outside
Azure, an app may carry ``settings`` (the connection settings of its messaging and state
accounts, ``BUS_POSTGRES_URL``...) or ``settingsFile`` (a local.settings.json, relative to the
system file). The file is input like any other: every fault is a ``ConfigurationError``
naming the file and the app.

Each app's ``Settings`` are resolved the one way every process resolves them
(``shared.settings.resolve_settings``), with the app's entry as a source over the tool's
environment; ``Worker`` and the configuration are built from them as usual.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.app_loader import APP_SETTING, configured_app
from shared.app_settings import APP_NAME
from shared.bus.app import STORES, BusApp
from shared.config import AppConfig, build_config
from shared.errors import ConfigurationError, InvalidName
from shared.resources import check_app_name
from shared.settings import Settings, load_local_settings, resolve_settings

APP_KEYS = frozenset(
    {"name", "busApp", "store", "settings", "settingsFile", "sendsTo", "resources", "appSettings"}
)
"""What an app's entry may hold: the template's keys (``sendsTo``, ``resources`` and
``appSettings`` are the deployment's; the tools read ``appSettings`` as the app's settings)
and the tools' own ``settings`` / ``settingsFile``."""
PLAIN_KEYS = frozenset({"$schema", "apps"})
PARAMETERS_KEYS = frozenset({"$schema", "contentVersion", "parameters"})


@dataclass(frozen=True)
class SystemApp:
    """One app of the system as the file lists it, with its resolved settings."""

    name: str
    bus_app: str
    store: str
    settings: Settings


@dataclass(frozen=True)
class LoadedApp:
    """One app of the system, loaded: its ``BusApp`` and the configuration built for it."""

    entry: SystemApp
    app: BusApp
    config: AppConfig

    @property
    def name(self) -> str:
        return self.entry.name


@dataclass(frozen=True)
class System:
    path: Path
    apps: tuple[SystemApp, ...]

    def load(self) -> list[LoadedApp]:
        """Every app loaded and configured; two apps running the same endpoint (their queue,
        their table) are refused, naming both."""
        loaded: list[LoadedApp] = []
        owners: dict[str, str] = {}
        for entry in self.apps:
            where = f"system file {self.path}, app {entry.name}"
            try:
                app = configured_app(entry.settings)
                config = build_config(entry.settings, app_name=app.name)
            except ConfigurationError as e:
                raise ConfigurationError(f"{where}: {e}") from e
            _check_store(entry, app, config.bus.performer_endpoint, where)
            for endpoint in app.running_endpoints(config.app_name):
                if endpoint in owners:
                    raise ConfigurationError(
                        f"{where}: endpoint {endpoint} is also app {owners[endpoint]}'s: two "
                        "apps of a system cannot run one endpoint (one queue, one table)"
                    )
                owners[endpoint] = entry.name
            loaded.append(LoadedApp(entry, app, config))
        return loaded


DATABASES = {"postgres": "PostgreSQL", "cosmos": "Cosmos DB"}
"""The stores an app of a system keeps in a database of its own, which the system template
deploys for an app of that store only (``infra/app/system-app.bicep``)."""
STORE_NAMES = {"table": "tables", "blob": "blob documents", **DATABASES}


def store_fault(store: str, endpoint_stores: Mapping[str, str], bus_app: str) -> str | None:
    """Why an app (``bus_app``, for the message) of store ``store`` cannot keep its
    endpoints' rows where they declare (``endpoint_stores``: endpoint to store), or None when
    it can.

    Every app has a state account of its own, which holds ``table`` rows and ``blob``
    documents (its ``<endpoint>-rows`` containers); ``postgres`` and ``cosmos`` add a database,
    one per app. So an endpoint in a database needs the app's store to be that database (no
    other app's is deployed for it), and a store other than ``table`` needs one endpoint
    there at least (else the database is for nothing, or the name says what is not so), the
    others keeping their rows in the state account: an app of a team's tables beside a web
    request's sessions in its own database, as the sample's ``orders`` with
    ``SAMPLE_STOREFRONT_STORE=postgres``."""
    for database, name in DATABASES.items():
        there = sorted(e for e, s in endpoint_stores.items() if s == database)
        if there and store != database:
            return (
                f"store is {store}, but endpoint(s) {', '.join(there)} of {bus_app} keep "
                f"their rows in {name} (give the app store {database}; an app of a system "
                "has one database beside its state account)"
            )
    if store != "table" and store not in endpoint_stores.values():
        where = STORE_NAMES.get(store, store)
        return (
            f"store is {store}, but endpoint(s) {', '.join(sorted(endpoint_stores))} of "
            f"{bus_app} keep their rows in another store (none in {where})"
        )
    return None


def _check_store(entry: SystemApp, app: BusApp, performer: str, where: str) -> None:
    """The store the file deploys for the app is where its endpoints keep their rows
    (``store_fault``). The effects performer, which the runtime adds to an app that declares
    services, is left out: its markers are table rows wherever the app's state is."""
    stores = {name: e.store for name, e in app.endpoints.items() if name != performer}
    fault = store_fault(entry.store, stores, entry.bus_app)
    if fault is not None:
        raise ConfigurationError(f"{where}: {fault}")


def load_system(path: Path, environ: Mapping[str, str] | None = None) -> System:
    """The system file at ``path``, each app's settings resolved over ``environ`` (default:
    this process's environment)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigurationError(f"cannot read system file {path}: {e}") from None
    entries = _app_entries(document, path)
    apps: list[SystemApp] = []
    for number, entry in enumerate(entries, 1):
        app = _system_app(entry, number, path, environ)
        if any(app.name == seen.name for seen in apps):
            raise ConfigurationError(f"system file {path}: app {app.name} is listed twice")
        apps.append(app)
    return System(path, tuple(apps))


def _app_entries(document: object, path: Path) -> Sequence[object]:
    if not isinstance(document, dict):
        raise ConfigurationError(f"system file {path}: expected a JSON object")
    if "parameters" in document:
        _refuse_unknown(document, PARAMETERS_KEYS, f"system file {path}")
        parameters = document["parameters"]
        apps = parameters.get("apps") if isinstance(parameters, dict) else None
        listed = apps.get("value") if isinstance(apps, dict) else None
        what = "parameters.apps.value"
    else:
        _refuse_unknown(document, PLAIN_KEYS, f"system file {path}")
        listed = document.get("apps")
        what = "apps"
    if not isinstance(listed, list) or not listed:
        raise ConfigurationError(
            f"system file {path}: {what} must be a non-empty list of apps (a plain "
            '{"apps": [...]} or the system template\'s parameters file)'
        )
    return listed


def _system_app(
    entry: object, number: int, path: Path, environ: Mapping[str, str] | None
) -> SystemApp:
    where = f"system file {path}, app {number}"
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: expected an object with name, busApp and store")
    name = _text(entry, "name", where)
    try:
        check_app_name(name)
    except InvalidName as e:
        raise ConfigurationError(f"{where}: {e}") from None
    where = f"system file {path}, app {name}"
    _refuse_unknown(entry, APP_KEYS, where)
    bus_app = _text(entry, "busApp", where)
    store = _text(entry, "store", where)
    if store not in STORES:
        raise ConfigurationError(f"{where}: store {store!r} is not one of {list(STORES)}")
    values = {
        **_strings(entry.get("appSettings", {}), "appSettings", where),
        **_settings_file(entry, path, where),
        **_strings(entry.get("settings", {}), "settings", where),
        APP_SETTING: bus_app,
        APP_NAME.name: name,
    }
    layer = (f"system file {path} (app {name})", values)
    settings = resolve_settings(environ=environ, local_file=None, system_app=layer)
    return SystemApp(name, bus_app, store, settings)


def _settings_file(entry: Mapping[str, Any], path: Path, where: str) -> dict[str, str]:
    if "settingsFile" not in entry:
        return {}
    if "settings" in entry:
        raise ConfigurationError(f"{where}: give settings or settingsFile, not both")
    named = _text(entry, "settingsFile", where)
    file = path.parent / named
    if not file.is_file():
        raise ConfigurationError(f"{where}: settingsFile {file} does not exist")
    try:
        return load_local_settings(file)
    except ConfigurationError as e:
        raise ConfigurationError(f"{where}: {e}") from None


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where}: {key} must be a non-empty string")
    return value.strip()


def _strings(value: object, key: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigurationError(f"{where}: {key} must be an object of string values")
    reserved = sorted({APP_SETTING, APP_NAME.name} & set(value))
    if reserved:
        raise ConfigurationError(
            f"{where}: {key} sets {', '.join(reserved)}, which the app's busApp and name give"
        )
    return dict(value)


def _refuse_unknown(entry: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(str(key) for key in entry if key not in known)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown key(s) {', '.join(repr(k[:60]) for k in unknown)} "
            f"(expected {', '.join(sorted(known))})"
        )
