"""The concurrent large-body bench (``lab.bench.payload_concurrent``) at a tiny size on
Azurite: without a budget every body is taken at once; with the default one the budget's
own peak stays within it, and what it refused is answered 503 busy. Behaviour only, never
timings or memory figures."""

from __future__ import annotations

import pytest

from lab.bench.payload_concurrent import measured
from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import unique_name

pytestmark = pytest.mark.azurite

AT_ONCE = 6


async def test_the_default_budget_bounds_what_is_held_and_refuses_the_rest(
    azurite: AzuriteEndpoints,
) -> None:
    async with AzureStorageAccount(StorageSettings(azurite.connection_string)) as account:
        unbounded_receive, unbounded_ingress, receive, ingress = await measured(
            account, 0.02, AT_ONCE, unique_name("")[:6]
        )

    assert unbounded_receive.outcomes == {"processed": AT_ONCE}
    assert unbounded_ingress.outcomes == {"202": AT_ONCE}
    assert receive.outcomes["processed"] + receive.outcomes["postponed"] == AT_ONCE
    assert 0 < receive.budget_peak <= receive.budget_capacity
    assert ingress.outcomes["202"] >= 1
    assert ingress.outcomes["202"] + ingress.outcomes["503 busy"] == AT_ONCE
    assert ingress.budget_peak <= ingress.budget_capacity
    assert "x the body" in receive.report()
