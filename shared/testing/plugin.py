"""The kit's pytest plugin: fixtures for a test of the user's app. The package registers it
(the ``pytest11`` entry point), so installing the package is enough.

``bus_app`` is the app ``BUS_APP`` names (from the environment or ``local.settings.json``,
as the host finds it); a test module or conftest.py that defines its own ``bus_app`` fixture
tests that app instead. ``bus_kit`` is a fresh kit of it for each test."""

from __future__ import annotations

import pytest

from shared.app_loader import configured_app
from shared.bus import BusApp
from shared.settings import resolve_settings
from shared.testing.kit import BusKit


@pytest.fixture
def bus_app() -> BusApp:
    """The app under test: the one ``BUS_APP`` names."""
    return configured_app(resolve_settings())


@pytest.fixture
def bus_kit(bus_app: BusApp) -> BusKit:
    """A kit running ``bus_app`` on fresh in-memory stores and a manual clock."""
    return BusKit(bus_app)
