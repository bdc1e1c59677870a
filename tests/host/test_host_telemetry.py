"""The sample app in the local host, as a separate process, with ``OTEL_TRACES_EXPORTER=console``:
a PlaceOrder posted over HTTP with a ``traceparent`` shows as one trace through orders,
payments, the performer's call to the payment provider, the charge's answer and shipping in
the spans the host prints when it stops."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import runtime
from shared.bus.effects import PERFORMER_ENDPOINT, EffectRequest
from shared.provisioning import provision
from shared.sample.app import ChargeAnswered
from shared.sample.charges import PROVIDER
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import sample_provider_settings, started_azurite

pytestmark = pytest.mark.azurite

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    """The sample app's resource names are fixed: a private emulator keeps them apart."""
    yield from started_azurite()


def printed_spans(log: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed among the host's log lines."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := log.find("{\n", at)) != -1:
        try:
            found, at = decoder.raw_decode(log, at)
        except ValueError:
            at += 1
            continue
        if isinstance(found, dict) and "context" in found:
            spans.append(found)
    return spans


async def test_one_trace_through_the_sample_order_flow_in_the_local_host(
    own_azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "APPLICATIONINSIGHTS_", "BUS_"))
    }
    host = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **environ,
            "AzureWebJobsStorage": own_azurite.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            "BUS_HOST_FUNCTION_KEY": "fn-key",
            **sample_provider_settings(),
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_SERVICE_NAME": "bus-sample",
        },
        tmp_path / "host.log",
    )
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        await worker.bus().subscribe_all()
        await asyncio.to_thread(host.start)
        try:
            async with aiohttp.ClientSession() as session:
                response = await session.post(
                    f"{host.url}/api/messages",
                    headers={
                        "x-functions-key": "fn-key",
                        "Idempotency-Key": "order-traced",
                        "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01",
                    },
                    json={
                        "type": "PlaceOrder",
                        "to": "orders",
                        "body": {"order_id": "order-traced", "customer": "ada", "amount_cents": 1},
                    },
                )
                assert response.status == 202, await response.text()
            assert await demo.quiescent(account, time.monotonic() + 60)
        finally:
            assert await asyncio.to_thread(host.stop) == 0  # exporting what is left, at exit

    spans = printed_spans((tmp_path / "host.log").read_text())
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    [ingress] = by_name["ingress PlaceOrder"]
    assert ingress["parent_id"] == f"0x{CALLER_SPAN}"
    parent = ingress
    for endpoint, handled in (
        ("orders", "PlaceOrder"),
        ("payments", "ChargePayment"),
        (PERFORMER_ENDPOINT, EffectRequest.type_name()),
        ("payments", ChargeAnswered.type_name()),
        ("shipping", "ShipOrder"),
    ):
        [receive] = [
            s
            for s in by_name[f"receive {endpoint}"]
            if s["attributes"]["bus.message.type"] == handled
        ]
        assert receive["attributes"]["bus.outcome"] == "processed"
        assert receive["parent_id"] == parent["context"]["span_id"], endpoint
        [parent] = [
            s
            for s in by_name[f"handle {handled}"]
            if s["parent_id"] == receive["context"]["span_id"]
        ]
    [call] = by_name[f"call {PROVIDER} charge"]
    [performed] = by_name[f"handle {EffectRequest.type_name()}"]
    assert call["parent_id"] == performed["context"]["span_id"]
    assert {s["context"]["trace_id"] for s in spans} == {f"0x{TRACE_ID}"}
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"bus-sample"}
    assert {"receive loyalty", "handle OrderPlaced"} <= set(by_name)  # the event, same trace
