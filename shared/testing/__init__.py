"""A test kit for apps built on the bus: run an app's endpoints through the real pipeline over
in-memory stores, on a manual clock, and check them under duplicates and crashes
(``docs/testing-your-app.md``). For tests only: the deployed function app never imports it.

Its pytest plugin (``shared.testing.plugin``, registered by the package) gives the fixtures
``bus_app`` and ``bus_kit``."""

from shared.bus.poison import PoisonRecord
from shared.effects.memory import InMemoryProvider, LedgerEntry
from shared.errors import KitError
from shared.stores.instrumented import Operation
from shared.testing.kit import BusKit, When
from shared.testing.records import AuditEntry, Caused, Delivered

__all__ = [
    "AuditEntry",
    "BusKit",
    "Caused",
    "Delivered",
    "InMemoryProvider",
    "KitError",
    "LedgerEntry",
    "Operation",
    "PoisonRecord",
    "When",
]
