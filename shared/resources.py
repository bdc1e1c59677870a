"""The storage resource names an app uses, and ``infra/resources.json`` that lists them.

The app is the source of truth: its endpoints name the queues, poison queues and tables; the
containers every app of a system shares (its signalling and payload storage) have fixed names
(``SHARED_CONTAINERS``); the app's own containers and tables (``APP_CONTAINERS``,
``APP_TABLES``: ingress records, cleanup leases and checkpoints, the operators' journal, the
discarded archive, the audit's verdict) and its effects performer are named after the app's
name (``BusApp(name=...)`` or ``BUS_APP_NAME``), so that two apps on one messaging account
never collide. An app without a name keeps the unprefixed names of a single app per account
(``CONTAINERS``, ``TABLES``): an app deployed before names existed finds its records where
it left them.

``infra/resources.json`` is produced from the app by ``bus resources > infra/resources.json``
so that Bicep (which cannot run Python) provisions the same names in Azure; ``bus provision``
and the tests refuse a file that no longer matches the app (``check_resources_file``).

Each resource belongs to one of two storage roles (``MESSAGING``, ``STATE``; ``by_role``).
The messaging account, which the apps of a system share, holds the queues and poison queues,
every container and the app-wide tables (``TABLES``). The state account, the app's own
(``BUS_STATE_STORAGE_SETTING``; by default the messaging account), holds each endpoint's
table: its state rows, outbox records, audit rows and, for the performer, effect markers. The
app-wide tables are messaging's: they hold no endpoint's rows, so no commit of the receive path
spans them and an endpoint's table, and the operator's tools (journal, discard archive, audits,
the cleanup's checkpoints) reach them where the parked messages and tokens they act on are.
In ``infra/resources.json`` the split needs no field of its own: ``endpoints`` names the state
tables, ``containers`` and ``tables`` are the messaging account's.

The file is the one of the project being worked on: ``infra/resources.json`` in the current
folder (the function app's folder, where ``bus resources`` writes it), never the copy beside
an installed library; ``bus provision --resources-file`` names another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shared.app_settings import APP_NAME, APP_NAME_ACCEPTS, read
from shared.errors import ConfigurationError, InvalidName
from shared.stores.names import check_container_name, check_queue_name, check_table_name

RESOURCES_FILE = Path("infra") / "resources.json"
"""Relative: the function app's folder is the current one, as ``local.settings.json``."""
POISON_SUFFIX = "-poison"
GENERATE_COMMAND = "bus resources > infra/resources.json"
SHARED_CONTAINERS = {
    "tokens": "tokens",
    "topics": "topics",
    "parked": "parked",
    "payloads": "payloads",
}
"""Blob containers every app of a system shares, under fixed names: outgoing tokens, topics'
recipient lists, parked originals, and the bodies a message's tokens share
(``shared.bus.payloads``)."""
APP_CONTAINERS = {"discarded": "discarded", "audits": "audits"}
"""Blob containers of one app: the poison messages its operators discarded, kept for their
retention (docs/console.md), and its last audit's verdict and report
(``shared.audit.published``). Named ``<app>-<name>`` for a named app."""
APP_TABLES = {"ingress": "ingress", "cleanup": "cleanup", "actions": "operatoractions"}
"""Tables of one app: its ingress records, its cleanup's leases and checkpoints, and the
journal of its operators' replays and discards (``shared.bus.journal``). Named
``<app><name>`` for a named app."""
CONTAINERS = {**SHARED_CONTAINERS, **APP_CONTAINERS}
"""Every container of an app without a name."""
TABLES = dict(APP_TABLES)
"""Every table but the endpoints' of an app without a name."""
PERFORMER = "effects"
"""The effects performer's endpoint (queue, poison queue and table) of an app without a
name; ``<app>effects`` for a named app (``performer_endpoint``)."""
FILE_COMMENT = (
    f"Generated from the app by `{GENERATE_COMMAND}`; do not edit by hand. Bicep loads it "
    "with loadJsonContent to provision Azure; bus provision creates the same resources in "
    "Azurite. Each endpoint names its queue, its poison queue (<name>-poison) and its table."
)


MESSAGING = "messaging"
"""The role of the account the apps of a system share (``BUS_STORAGE_SETTING``)."""
STATE = "state"
"""The role of an app's own account for its endpoints' rows (``BUS_STATE_STORAGE_SETTING``)."""


@dataclass(frozen=True)
class RoleResources:
    """What one storage role's account holds."""

    queues: list[str]
    containers: list[str]
    tables: list[str]


@dataclass(frozen=True)
class Resources:
    containers: dict[str, str]
    tables: dict[str, str]
    endpoints: tuple[str, ...]
    blob_endpoints: tuple[str, ...] = ()
    """The endpoints that keep their rows as blob documents (``store="blob"``): each has its
    rows container (``rows_container``) in the state account."""
    cosmos_endpoints: tuple[str, ...] = ()
    """The endpoints that keep their rows in Cosmos DB (``store="cosmos"``): each has its
    container, named after it, in the app's Cosmos DB database."""

    @property
    def rows_containers(self) -> list[str]:
        return [rows_container(e) for e in self.blob_endpoints]

    @property
    def queue_names(self) -> list[str]:
        """Every endpoint's queue and its poison queue."""
        return [q for e in self.endpoints for q in (e, poison_queue(e))]

    @property
    def table_names(self) -> list[str]:
        return [*self.tables.values(), *self.endpoints]

    def by_role(self) -> dict[str, RoleResources]:
        """Which account holds what: the queues, containers and app-wide tables the messaging
        account, each endpoint's table the state account (see the module's docstring)."""
        return {
            MESSAGING: RoleResources(
                self.queue_names, self.container_names, list(self.tables.values())
            ),
            STATE: RoleResources([], self.rows_containers, list(self.endpoints)),
        }

    @property
    def container_names(self) -> list[str]:
        return list(self.containers.values())


def poison_queue(queue: str) -> str:
    """The Functions host moves a message here after maxDequeueCount failed deliveries."""
    return f"{queue}{POISON_SUFFIX}"


def check_endpoint_name(name: str) -> str:
    """Endpoint names double as queue and table names, so they must satisfy both rules."""
    if not (
        3 <= len(name) <= 40
        and name.isascii()
        and name.isalnum()
        and name.islower()
        and name[0].isalpha()
    ):
        raise InvalidName(
            f"invalid endpoint name {name!r}: use 3-40 lowercase letters and digits, starting "
            "with a letter (it names a queue, a poison queue and a table)"
        )
    check_queue_name(poison_queue(name))
    check_table_name(name)
    return name


ROWS_SUFFIX = "-rows"


def rows_container(endpoint: str) -> str:
    """The container of a ``store="blob"`` endpoint's documents, in the state account, as its
    table would be: ``<endpoint>-rows`` (no shared or app container ends so)."""
    return check_container_name(f"{endpoint}{ROWS_SUFFIX}")


def load_resources(path: Path = RESOURCES_FILE) -> Resources:
    if not path.exists():
        raise ConfigurationError(
            f"no resources file {path.absolute()}: run `{GENERATE_COMMAND}` in the function "
            "app's folder, or name the file with --resources-file"
        )
    try:
        raw = json.loads(path.read_text())
        containers = {str(k): check_container_name(str(v)) for k, v in raw["containers"].items()}
        tables = {str(k): check_table_name(str(v)) for k, v in raw["tables"].items()}
        endpoints = tuple(check_endpoint_name(str(e)) for e in raw["endpoints"])
        blob_endpoints = tuple(check_endpoint_name(str(e)) for e in raw.get("blobEndpoints", []))
        cosmos = tuple(check_endpoint_name(str(e)) for e in raw.get("cosmosEndpoints", []))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigurationError(f"cannot read resource names from {path}: {e}") from e
    if len(set(endpoints)) != len(endpoints):
        raise ConfigurationError(f"{path}: endpoint names must be unique")
    return Resources(
        containers,
        tables,
        endpoints,
        _among("blob", endpoints, blob_endpoints),
        _among("cosmos", endpoints, cosmos),
    )


def check_app_name(name: str | None) -> str | None:
    """An app name as ``BusApp(name=...)`` declares it (None: no name), by the rule of
    ``BUS_APP_NAME``: it becomes part of table, container, queue and endpoint names."""
    if name is None:
        return None
    try:
        return APP_NAME.parse(str(name))
    except ValueError:
        raise InvalidName(f"invalid app name {name!r}: use {APP_NAME_ACCEPTS}") from None


def app_name_of(
    settings: Mapping[str, str], declared: str | None, origin: str | None = None
) -> str | None:
    """The app's name: the ``BUS_APP_NAME`` setting when set (it wins; ``origin`` says where
    it came from in an error), else the name the app declares (``BusApp(name=...)``), else
    None."""
    return read(APP_NAME, settings, origin) or check_app_name(declared)


def app_containers(app_name: str | None) -> dict[str, str]:
    """The app's own containers (``APP_CONTAINERS``), named after the app."""
    prefix = "" if app_name is None else f"{check_app_name(app_name)}-"
    return {key: check_container_name(prefix + name) for key, name in APP_CONTAINERS.items()}


def app_tables(app_name: str | None) -> dict[str, str]:
    """The app's own tables (``APP_TABLES``), named after the app."""
    prefix = check_app_name(app_name) or ""
    return {key: check_table_name(prefix + name) for key, name in APP_TABLES.items()}


def performer_endpoint(app_name: str | None) -> str:
    """The endpoint of the app's effects performer: its queue, poison queue and table."""
    return check_endpoint_name((check_app_name(app_name) or "") + PERFORMER)


def resources_for(
    endpoints: Iterable[str],
    app_name: str | None = None,
    blob_endpoints: Iterable[str] = (),
    cosmos_endpoints: Iterable[str] = (),
) -> Resources:
    """The resources of an app with these endpoint names (``BusApp.endpoints``) and this name
    (``app_name_of``): the shared containers, and the app's own containers and tables;
    ``blob_endpoints`` and ``cosmos_endpoints`` those of them that keep their rows as blob
    documents or in Cosmos DB."""
    names = tuple(check_endpoint_name(e) for e in endpoints)
    tables = app_tables(app_name)
    clashing = sorted(set(names) & set(tables.values()))
    if clashing:
        raise ConfigurationError(
            f"endpoints {clashing} have the names of the app's own tables: rename them"
        )
    return Resources(
        {**SHARED_CONTAINERS, **app_containers(app_name)},
        tables,
        names,
        _among("blob", names, blob_endpoints),
        _among("cosmos", names, cosmos_endpoints),
    )


def _among(store: str, endpoints: tuple[str, ...], chosen: Iterable[str]) -> tuple[str, ...]:
    """``chosen`` in order, refused unless each is one of ``endpoints``."""
    found = tuple(sorted(set(chosen)))
    unknown = sorted(set(found) - set(endpoints))
    if unknown:
        raise ConfigurationError(f"{store} endpoints {unknown} are not endpoints of the app")
    return found


class NamedResources(Protocol):
    """The names a bus runs on (``shared.bus.config.BusConfig``, which this layer below the
    bus does not import)."""

    @property
    def tokens_container(self) -> str: ...
    @property
    def topics_container(self) -> str: ...
    @property
    def parked_container(self) -> str: ...
    @property
    def payloads_container(self) -> str: ...
    @property
    def discarded_container(self) -> str: ...
    @property
    def audits_container(self) -> str: ...
    @property
    def ingress_table(self) -> str: ...
    @property
    def actions_table(self) -> str: ...


def resources_of(
    config: NamedResources,
    endpoints: Iterable[str],
    blob_endpoints: Iterable[str] = (),
    cosmos_endpoints: Iterable[str] = (),
) -> Resources:
    """The resources of a bus running on ``config``'s names with these endpoints' queues and
    tables (and rows containers of ``blob_endpoints``): what a test, a bench or the simulator
    provisions for the bus it builds."""
    containers = {
        "tokens": config.tokens_container,
        "topics": config.topics_container,
        "parked": config.parked_container,
        "payloads": config.payloads_container,
        "discarded": config.discarded_container,
        "audits": config.audits_container,
    }
    tables = {"ingress": config.ingress_table, "actions": config.actions_table}
    names = tuple(endpoints)
    return Resources(
        containers,
        tables,
        names,
        _among("blob", names, blob_endpoints),
        _among("cosmos", names, cosmos_endpoints),
    )


def resources_json(resources: Resources) -> str:
    """The text of ``infra/resources.json`` for ``resources`` (what ``bus resources`` prints)."""
    document: dict[str, object] = {
        "$comment": FILE_COMMENT,
        "containers": resources.containers,
        "tables": resources.tables,
        "endpoints": list(resources.endpoints),
    }
    if resources.blob_endpoints:
        document["blobEndpoints"] = list(resources.blob_endpoints)
    if resources.cosmos_endpoints:
        document["cosmosEndpoints"] = list(resources.cosmos_endpoints)
    return json.dumps(document, indent=2) + "\n"


def check_resources_file(expected: Resources, path: Path = RESOURCES_FILE) -> None:
    """Refuse a resources file that does not list exactly the app's names: Bicep would
    provision other queues than the function app reads."""
    found = load_resources(path)
    differences = [
        *_difference("endpoints", expected.endpoints, found.endpoints),
        *_difference("containers", expected.container_names, found.container_names),
        *_difference("tables", expected.table_names, found.table_names),
        *_difference("blob endpoints", expected.blob_endpoints, found.blob_endpoints),
        *_difference("cosmos endpoints", expected.cosmos_endpoints, found.cosmos_endpoints),
    ]
    if differences:
        raise ConfigurationError(
            f"{path} does not match the app ({'; '.join(differences)}): run `{GENERATE_COMMAND}`"
        )


def _difference(what: str, app: Iterable[str], file: Iterable[str]) -> list[str]:
    only_app, only_file = sorted(set(app) - set(file)), sorted(set(file) - set(app))
    return [f"{what} {only_app} missing from the file"] * bool(only_app) + [
        f"{what} {only_file} not in the app"
    ] * bool(only_file)
