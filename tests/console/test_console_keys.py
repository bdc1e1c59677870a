"""The deployed console against the keys an ingress client holds, in a real host process
(``lab.host``, whose one function key opens every function-level route, as a host key does on
Azure) on a private Azurite: the client sends, and cannot open the console with that key nor
with none; without a credential of the console's own, or with the Entra options and App
Service authentication off, the app does not start at all."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.bus.poison import Reason, poison_body
from shared.errors import ConfigurationError
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite
from tests.host.test_hostile_http import provisioned

pytestmark = pytest.mark.azurite

HOST_KEY = "host-key-every-ingress-client-has"
SECRET = "console-only-secret-8d1f4c2a9b7e6f3d"
ORDER = {
    "type": "PlaceOrder",
    "to": "orders",
    "body": {"order_id": "o-1", "customer": "ada", "amount_cents": 1250},
}
CONSOLE_APIS = ("api/session", "api/failed", "api/failed/groups", "api/overview", "api/actions")


def host_environ(azurite: AzuriteEndpoints, **settings: str) -> dict[str, str]:
    return {
        **os.environ,
        "AzureWebJobsStorage": azurite.connection_string,
        "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
        "BUS_HOST_FUNCTION_KEY": HOST_KEY,
        "BUS_CONSOLE_ENABLED": "true",
        "BUS_CONSOLE_READ_ONLY": "false",
        **settings,
    }


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    for endpoints in started_azurite():
        asyncio.run(provisioned(endpoints))
        yield endpoints


@pytest.fixture(scope="module")
def host(own_azurite: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real function_app.py's ingress and console, the console with its secret."""
    process = HostProcess(
        REPO_ROOT / "function_app.py",
        host_environ(own_azurite, BUS_CONSOLE_SECRET=SECRET),
        tmp_path_factory.mktemp("keys") / "host.log",
        args=["--functions", "ingress", "console"],
    )
    process.start()
    yield process.url
    assert process.stop() == 0


@pytest.fixture
async def account(own_azurite: AzuriteEndpoints) -> AsyncIterator[StorageAccount]:
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        yield account


def call(
    url: str, method: str = "GET", *, headers: dict[str, str], body: object = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


async def test_an_ingress_client_with_a_host_key_sends_but_cannot_open_the_console(
    host: str, account: StorageAccount
) -> None:
    why = Reason("payments", "failed", 5, message_id="m-1", message_type="ChargePayment")
    await account.queue(poison_queue("payments")).send(poison_body('{"card": "4111"}', why))
    key = {"x-functions-key": HOST_KEY}
    discard = {"endpoint": "payments", "type": "ChargePayment", "reason": "mine now"}
    action = {**key, "Content-Type": "application/json", "Origin": host}

    sent = await asyncio.to_thread(
        call, f"{host}/api/messages", "POST", headers={**key, "Idempotency-Key": "k-1"}, body=ORDER
    )
    looked = [
        await asyncio.to_thread(call, f"{host}/api/console/{path}", headers=key)
        for path in CONSOLE_APIS
    ]
    in_query = await asyncio.to_thread(
        call, f"{host}/api/console/api/failed?code={HOST_KEY}", headers={}
    )
    keyless = await asyncio.to_thread(call, f"{host}/api/console/api/failed", headers={})
    discarded = await asyncio.to_thread(
        call, f"{host}/api/console/api/discard", "POST", headers=action, body=discard
    )

    assert sent[0] == 202, sent
    assert [status for status, _ in looked] == [401] * len(CONSOLE_APIS), looked
    assert (in_query[0], keyless[0]) == (401, 401)
    assert discarded[0] == 401
    assert all(
        "4111" not in json.dumps(answer) for _, answer in [*looked, in_query, keyless, discarded]
    )
    assert await account.queue(poison_queue("payments")).approximate_count() == 1
    operator = {**key, "X-Console-Secret": SECRET}
    journal = await asyncio.to_thread(call, f"{host}/api/console/api/actions", headers=operator)
    assert journal == (200, {"total": 0, "actions": []})


async def test_the_operator_with_the_secret_is_recorded_as_the_console_secret(
    host: str,
) -> None:
    operator = {"x-functions-key": HOST_KEY, "X-Console-Secret": SECRET}
    wrong = {"x-functions-key": HOST_KEY, "X-Console-Secret": SECRET[:-1] + "0"}

    status, session = await asyncio.to_thread(
        call, f"{host}/api/console/api/session", headers=operator
    )
    refused = await asyncio.to_thread(call, f"{host}/api/console/api/session", headers=wrong)

    assert (status, session["who"]) == (200, "console secret")
    assert refused[0] == 401


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({}, "BUS_CONSOLE_SECRET"),
        ({"BUS_CONSOLE_IDENTITY": "entra"}, "WEBSITE_AUTH_ENABLED"),
        (
            {"BUS_CONSOLE_SECRET": SECRET, "BUS_INGRESS_ENTRA_CALLERS": "true"},
            "BUS_INGRESS_ENTRA_CALLERS",
        ),
    ],
)
def test_the_app_does_not_start_on_a_key_alone_or_on_headers_nobody_vouches_for(
    own_azurite: AzuriteEndpoints, tmp_path: Path, settings: dict[str, str], named: str
) -> None:
    process = HostProcess(
        REPO_ROOT / "function_app.py",
        host_environ(own_azurite, **settings),
        tmp_path / "host.log",
        args=["--functions", "ingress", "console"],
    )

    with pytest.raises(ConfigurationError, match="did not become ready") as refused:
        process.start(timeout=60)

    assert named in str(refused.value)
    assert "host: configuration error" in process.log_path.read_text()
