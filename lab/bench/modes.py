"""Which modes the bench measures, and which of them this version of the bus offers.

The floor is the bench's own; the others are endpoint modes of the bus, read from
``shared.bus.app.Mode`` so that a mode added to the bus is measured without touching the bench.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from shared.bus.app import Mode, Store
from shared.errors import InvalidValue

AT_LEAST_ONCE = "at_least_once"
TOKEN = "token"
TOKEN_POSTGRES = "token_postgres"
"""Token mode with both endpoints' state, O(m) and audit rows in PostgreSQL."""
TOKEN_BLOB = "token_blob"
"""Token mode with each partition's rows in one JSON blob document (``store="blob"``)."""
TOKEN_COSMOS = "token_cosmos"
"""Token mode with each partition's rows in one Cosmos DB item (``store="cosmos"``)."""
STORES: dict[str, Store] = {TOKEN_POSTGRES: "postgres", TOKEN_BLOB: "blob", TOKEN_COSMOS: "cosmos"}
"""Token mode measured beside the Table Storage one on each other store, by bench label."""

# Bench labels of the modes the issue asks for, with the names the bus may give them.
_WANTED: dict[str, tuple[str, ...]] = {
    "processed_table": ("processed_messages", "processed_table", "processed_messages_table"),
    TOKEN: (TOKEN,),
    "state_based": ("state_based", "statebased", "state"),
}


@dataclass(frozen=True)
class BenchMode:
    label: str
    """Name in the table and in results.json."""
    bus_mode: str | None
    """The endpoint mode passed to ``app.endpoint``; None for the floor."""
    available: bool = True
    store: Store = "table"
    """Where the endpoints keep their rows: ``table``, ``postgres`` or ``cosmos`` (a server the
    bench starts) or ``blob`` (documents in the bench's Azurite)."""

    @property
    def is_floor(self) -> bool:
        return self.label == AT_LEAST_ONCE


def bus_modes() -> tuple[str, ...]:
    return tuple(str(m) for m in typing.get_args(Mode))


def as_mode(name: str) -> Mode:
    """Check ``name`` against the bus's modes (the type checker cannot see new ones)."""
    if name not in bus_modes():
        raise InvalidValue(f"the bus has no endpoint mode {name!r}; it offers {bus_modes()}")
    return typing.cast(Mode, name)


def bench_modes(offered: tuple[str, ...] | None = None) -> list[BenchMode]:
    """The floor, then every wanted mode (available or not), then any other mode the bus
    offers (an entity-outbox mode, say), each under its own name."""
    offered = bus_modes() if offered is None else offered
    modes = [BenchMode(AT_LEAST_ONCE, None)]
    used: set[str] = set()
    for label, aliases in _WANTED.items():
        found = next((a for a in aliases if a in offered), None)
        # Reported under the bus's own name once it exists, so the table speaks its language.
        modes.append(BenchMode(found or label, found, available=found is not None))
        if found is not None:
            used.add(found)
    modes += [BenchMode(m, m) for m in offered if m not in used]
    return modes


def postgres_modes(offered: tuple[str, ...] | None = None) -> list[BenchMode]:
    """Token mode over PostgreSQL, measured beside the Table Storage token mode (``make
    bench`` starts a private server for it; the in-memory tests have none)."""
    return [m for m in store_modes(offered) if m.store == "postgres"]


def store_modes(offered: tuple[str, ...] | None = None) -> list[BenchMode]:
    """Token mode on every store but Table Storage (``STORES``): PostgreSQL, blob documents
    and Cosmos DB, measured beside the Table Storage token mode."""
    offered = bus_modes() if offered is None else offered
    return [
        BenchMode(label, TOKEN, available=TOKEN in offered, store=store)
        for label, store in STORES.items()
    ]


def select(modes: list[BenchMode], labels: list[str] | None) -> list[BenchMode]:
    """Keep the modes named in ``labels`` (all when None), refusing unknown names."""
    if labels is None:
        return modes
    known = {m.label: m for m in modes}
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise InvalidValue(f"unknown bench mode(s) {unknown}; known: {sorted(known)}")
    return [known[label] for label in labels]
