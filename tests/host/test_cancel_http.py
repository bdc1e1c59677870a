"""HTTP cancel (issue 46): ``POST /api/messages/cancel`` through the real function_app.py's
functions behind the local host's front end: by the Idempotency-Key a message was sent with,
answered cancelled, processed or 404, with the ingress's keys, scopes and 503s."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import RawTestServer, TestClient

from lab.host.functions import load_functions
from lab.host.http import HttpFrontEnd, Keys
from shared import http_cancel, http_ingress, runtime
from shared.bus import Bus
from shared.bus.cancel import CancelResult
from shared.bus.client_cancel import CancelReceipt
from shared.bus.ingress import INGRESS_ROW
from shared.platform_identity import PlatformAuth
from shared.provisioning import provision
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity

REPO = Path(__file__).resolve().parents[2]
DUE_LATER: dict[str, Any] = {
    "type": "PlaceOrder",
    "to": "orders",
    "body": {"order_id": "o1", "customer": "ada", "amount_cents": 1250},
    "delay_seconds": 3600,
}


@pytest.fixture
async def bus() -> Bus:
    account = MemoryStorageAccount()
    worker = runtime.Worker.for_account(account)
    await provision(account, worker.resources)
    bus = worker.bus()
    await bus.subscribe_all()
    return bus


@pytest.fixture
async def served(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TestClient[Any, Any]]:
    monkeypatch.setattr(runtime, "_worker", runtime.Worker.for_account(bus.account))
    loaded = load_functions(REPO / "function_app.py", {"CLEANUP_SCHEDULE": "0 */5 * * * *"})
    front = HttpFrontEnd(loaded.http, Keys("fn", "master"), function_timeout=10)
    client: TestClient[Any, Any]
    async with TestClient(RawTestServer(front.dispatch)) as client:
        yield client


async def cancel(served: TestClient[Any, Any], key: str) -> tuple[int, dict[str, Any]]:
    response = await served.post("/api/messages/cancel?code=fn", headers={"Idempotency-Key": key})
    return response.status, await response.json()


async def test_a_delayed_message_is_cancelled_by_its_key_and_says_so_again(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    # Given a delayed order sent over HTTP
    headers = {"Idempotency-Key": "later-1"}
    sent = await served.post("/api/messages?code=fn", json=DUE_LATER, headers=headers)
    assert sent.status == 202
    [message_id] = (await sent.json())["message_ids"]

    # When the client cancels it, and again
    first, again = await cancel(served, "later-1"), await cancel(served, "later-1")

    # Then it is cancelled, and a repeat answers the same
    expected = {
        "idempotency_key": "later-1",
        "outcome": "cancelled",
        "messages": {message_id: "cancelled"},
    }
    assert first == again == (200, expected)
    # The route takes the function key as the ingress does
    unkeyed = await served.post("/api/messages/cancel", headers=headers)
    assert unkeyed.status == 401


async def test_a_message_processed_already_answers_processed(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    order = {**DUE_LATER, "delay_seconds": 0}
    sent = await served.post("/api/messages?code=fn", json=order, headers={"Idempotency-Key": "p"})
    [signal] = await bus.account.queue("orders").receive(1)
    await bus.receive("orders", signal.content)
    status, body = await cancel(served, "p")
    assert (status, body["outcome"]) == (200, "processed")
    assert body["messages"] == {(await sent.json())["message_ids"][0]: "processed"}


async def test_an_unknown_key_is_a_404_and_a_missing_or_doubled_one_a_400(
    served: TestClient[Any, Any],
) -> None:
    status, body = await cancel(served, "never-sent")
    assert status == 404
    assert "nothing was sent under Idempotency-Key 'never-sent'" in body["error"]
    assert (await served.post("/api/messages/cancel?code=fn")).status == 400
    assert (await cancel(served, "a, b"))[0] == 400
    assert (await served.get("/api/messages/cancel?code=fn")).status == 405


async def test_a_key_another_caller_sent_under_is_not_found_with_entra_callers() -> None:
    """With Entra callers each caller's keys are its own: another caller's key is a 404."""
    account = MemoryStorageAccount()
    worker = runtime.Worker.for_account(account)
    await provision(account, worker.resources)
    bus = worker.bus()
    bus.config = replace(bus.config, ingress_entra_callers=True, ingress_key_scopes=True)
    platform = PlatformAuth(enabled=True)

    def caller(object_id: str, key: str) -> dict[str, str]:
        return {
            "Idempotency-Key": key,
            "X-MS-CLIENT-PRINCIPAL-ID": object_id,
            "X-MS-CLIENT-PRINCIPAL-IDP": "aad",
        }

    body = json.dumps(DUE_LATER).encode()
    alice = "00000000-0000-0000-0000-00000000a11c"
    bob = "00000000-0000-0000-0000-000000000b0b"
    sent = await http_ingress.handle(bus, caller(alice, "k"), body, platform=platform)
    assert sent.status == 202
    other = await http_cancel.handle(bus, caller(bob, "k"), platform=platform)
    assert other.status == 404
    own = await http_cancel.handle(bus, caller(alice, "k"), platform=platform)
    assert (own.status, own.body["outcome"]) == (200, "cancelled")


async def test_a_key_whose_record_a_newer_version_wrote_is_a_503_to_retry(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    table = bus.account.table(bus.config.ingress_table)
    newer = Entity("http-newer", INGRESS_ROW, {"format": 3, "shape": "unknown to this version"})
    await table.insert(newer)
    response = await served.post(
        "/api/messages/cancel?code=fn", headers={"Idempotency-Key": "http-newer"}
    )
    assert response.status == 503
    assert response.headers["Retry-After"] == str(http_ingress.RETRY_AFTER_SECONDS)
    assert "format version 3" in (await response.json())["error"]
    assert (await table.get("http-newer", INGRESS_ROW)).properties == newer.properties


async def test_a_delayed_publish_is_cancelled_for_every_subscriber(
    served: TestClient[Any, Any], bus: Bus
) -> None:
    event = {
        "type": "OrderPlaced",
        "body": {"order_id": "o2", "customer": "bob", "amount_cents": 300},
        "delay_seconds": 600,
    }
    sent = await served.post("/api/messages?code=fn", json=event, headers={"Idempotency-Key": "e"})
    message_ids = (await sent.json())["message_ids"]
    assert len(message_ids) == 2  # loyalty and shipping
    status, body = await cancel(served, "e")
    assert (status, body["outcome"]) == (200, "cancelled")
    assert body["messages"] == dict.fromkeys(message_ids, "cancelled")


def test_a_send_that_created_no_message_has_nothing_to_cancel() -> None:
    """An event published while its topic had no subscriber sent nothing."""
    assert CancelReceipt("k", {}).as_json() == {
        "idempotency_key": "k",
        "outcome": "not_found",
        "messages": {},
    }
    mixed = CancelReceipt("k", {"a": CancelResult.CANCELLED, "b": CancelResult.PROCESSED})
    assert mixed.outcome == "mixed"
