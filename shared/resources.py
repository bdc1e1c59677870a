"""The storage resource names an app uses, and ``infra/resources.json`` that lists them.

The app is the source of truth: its endpoints name the queues, poison queues and tables, and
the shared containers and tables have fixed names (``CONTAINERS``, ``TABLES``).
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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from shared.errors import ConfigurationError, InvalidName
from shared.stores.names import check_container_name, check_queue_name, check_table_name

RESOURCES_FILE = Path("infra") / "resources.json"
"""Relative: the function app's folder is the current one, as ``local.settings.json``."""
POISON_SUFFIX = "-poison"
GENERATE_COMMAND = "bus resources > infra/resources.json"
CONTAINERS = {
    "tokens": "tokens",
    "topics": "topics",
    "parked": "parked",
    "payloads": "payloads",
    "discarded": "discarded",
    "audits": "audits",
}
"""Blob containers every app shares: outgoing tokens, topics' recipient lists, parked
originals, the bodies a message's tokens share (``shared.bus.payloads``), the poison
messages an operator discarded, kept for their retention (docs/console.md), and the last
audit's verdict and report (``shared.audit.published``)."""
TABLES = {"ingress": "ingress", "cleanup": "cleanup", "actions": "operatoractions"}
"""Tables every app shares: ingress records, the cleanup job's checkpoints, and the journal of
operators' replays and discards (``shared.bus.journal``)."""
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
            STATE: RoleResources([], [], list(self.endpoints)),
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
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigurationError(f"cannot read resource names from {path}: {e}") from e
    if len(set(endpoints)) != len(endpoints):
        raise ConfigurationError(f"{path}: endpoint names must be unique")
    return Resources(containers, tables, endpoints)


def resources_for(endpoints: Iterable[str]) -> Resources:
    """The resources of an app with these endpoint names (``BusApp.endpoints``)."""
    names = tuple(check_endpoint_name(e) for e in endpoints)
    return Resources(dict(CONTAINERS), dict(TABLES), names)


def resources_json(resources: Resources) -> str:
    """The text of ``infra/resources.json`` for ``resources`` (what ``bus resources`` prints)."""
    document = {
        "$comment": FILE_COMMENT,
        "containers": resources.containers,
        "tables": resources.tables,
        "endpoints": list(resources.endpoints),
    }
    return json.dumps(document, indent=2) + "\n"


def check_resources_file(expected: Resources, path: Path = RESOURCES_FILE) -> None:
    """Refuse a resources file that does not list exactly the app's names: Bicep would
    provision other queues than the function app reads."""
    found = load_resources(path)
    differences = [
        *_difference("endpoints", expected.endpoints, found.endpoints),
        *_difference("containers", expected.container_names, found.container_names),
        *_difference("tables", expected.table_names, found.table_names),
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
