"""The storage resource names the app uses, read from ``infra/resources.json``.

That file is the single source of truth: Bicep loads it to provision Azure, and
``shared.provisioning`` reads it to create the same resources in Azurite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from shared.errors import ConfigurationError, InvalidName
from shared.stores.names import check_container_name, check_queue_name, check_table_name

RESOURCES_FILE = Path(__file__).resolve().parents[1] / "infra" / "resources.json"
POISON_SUFFIX = "-poison"


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
