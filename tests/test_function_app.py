"""The function app's bindings, exercised without the Functions host."""

from __future__ import annotations

import json

import azure.functions as func
import pytest

import function_app
from shared import runtime
from shared.local.azurite import AzuriteEndpoints
from shared.provisioning import provision
from shared.resources import load_resources
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount


def test_every_function_is_declared_with_its_trigger() -> None:
    functions = {f.get_function_name(): f for f in function_app.app.get_functions()}
    function_app.app.functions_bindings = None  # get_functions() may only be called once
    assert "health" in functions
    trigger = functions["health"].get_trigger()
    assert trigger.get_binding_name() == "httpTrigger"
    assert trigger.name == "req"


async def test_health_reports_missing_resources_then_healthy_once_provisioned() -> None:
    account = MemoryStorageAccount()
    status, body = await runtime.health(account)
    assert status == 503
    assert "queue orders" in json.loads(body)["missing"]

    await provision(account, load_resources())
    status, body = await runtime.health(account)
    assert status == 200
    assert json.loads(body)["checked"] > 10


@pytest.mark.azurite
async def test_health_function_answers_against_azurite(
    azurite: AzuriteEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = AzureStorageAccount(StorageSettings(azurite.connection_string))
    monkeypatch.setattr(runtime, "_account", account)
    try:
        await provision(account, load_resources())
        request = func.HttpRequest("GET", "/api/health", body=b"")
        response = await function_app.health(request)
        assert response.status_code == 200
        assert json.loads(response.get_body())["healthy"] is True
    finally:
        await account.close()
