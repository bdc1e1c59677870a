from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.provider.client import Client, started


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """A provider with no faults, served on a free port, and a client session to it."""
    async for running in started():
        yield running
