"""A private Azurite for tests that read every row of the sample app's fixed-name tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.errors import ConfigurationError
from shared.local.azurite import Azurite, AzuriteEndpoints
from tests.conftest import UNDER_CI


def private_azurite() -> Iterator[AzuriteEndpoints]:
    emulator = Azurite()
    try:
        endpoints = emulator.start()
    except ConfigurationError as e:
        if UNDER_CI:
            pytest.fail(f"Azurite is required under CI and could not start: {e}")
        pytest.skip(f"Azurite unavailable (run `make deps`): {e}")
    yield endpoints
    emulator.stop()
