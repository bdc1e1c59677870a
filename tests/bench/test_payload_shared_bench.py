"""The shared-payload bench (``lab.bench.payload_shared``) at a tiny size on Azurite: both
runs process every subscriber's copy once, and the counts say what each wrote and read.
Behaviour only, never timings."""

from __future__ import annotations

import pytest

from lab.bench.payload_shared import INLINE, SHARED, Run, one_run, show
from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount

pytestmark = pytest.mark.azurite

BODY = 20 * 1024


async def test_shared_writes_the_body_once_and_inline_once_per_subscriber(
    azurite: AzuriteEndpoints,
) -> None:
    async with AzureStorageAccount(StorageSettings(azurite.connection_string)) as account:
        shared, inline = [
            await one_run(account, Run(run.label, run.min_chars, f"t{run.suffix}"), 3, BODY, 2)
            for run in (SHARED, INLINE)
        ]

    assert (shared.processed, inline.processed) == (3, 3)
    assert BODY <= shared.publish_written < BODY + 3 * 1024  # the body, and three small tokens
    assert 3 * BODY <= inline.publish_written < 3 * BODY + 3 * 1024
    assert min(shared.read, inline.read) >= 3 * BODY  # each subscriber reads it
    assert shared.requests == inline.requests + 1  # the payload's upload
    assert "shared vs inline (medians)" in show([shared, inline])
    assert "one send at a time" not in show([shared, inline])
