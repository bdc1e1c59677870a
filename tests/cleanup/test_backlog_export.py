"""What Azure Monitor receives from a cleanup pass: the real exporter of the distro
(``AzureMonitorMetricExporter``, as ``configure_azure_monitor`` sets it up) posting to a real
HTTP server here in place of the ingestion endpoint.

It shows what the alert queries (infra/app/alerts/*.kql, docs/alerts.md) rely on:
- each figure is an envelope named as the instrument, its attribute a property (what
  Application Insights stores as ``name`` and ``customDimensions`` of ``customMetrics``);
- a pass's count and its figures leave in one export, with one time and one instance;
- the next export repeats the figures, with a new time and no count: a process keeps sending
  the last values it measured, so only the rows exported with a pass's count are that pass's.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from azure.monitor.opentelemetry.exporter import AzureMonitorMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

from shared.bus.telemetry import DESTINATION, SENDER
from shared.cleanup.backlog import OUTSIDE
from shared.cleanup.now import cleanup_pass
from shared.cleanup.settings import CleanupSettings
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.cleanup.test_backlog import (
    IN_FLIGHT,
    OLDEST,
    PARKED,
    PASSES,
    Ping,
    relay_and_stuck,
)
from tests.conftest import Backend, unique_name

FIGURES = {PARKED, IN_FLIGHT, OLDEST.name}
"""The instruments' names, which the alert queries use (tests/infra/test_alert_rules.py)."""


class Ingestion(BaseHTTPRequestHandler):
    """Application Insights' track endpoint: keeps every envelope posted, accepts them all."""

    received: list[list[dict[str, Any]]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        envelopes = json.loads(body)
        self.received.append(envelopes)
        answer = json.dumps(
            {"itemsReceived": len(envelopes), "itemsAccepted": len(envelopes), "errors": []}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[MeterProvider, list[Any]]]:
    """A meter provider exporting as the distro does, to an ingestion endpoint here; the
    envelopes of each export as they arrived."""
    # Nothing of the exporter's own statistics: they would go out to Azure, or to this server
    # after it stopped.
    monkeypatch.setenv("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")
    monkeypatch.setenv("APPLICATIONINSIGHTS_SDKSTATS_DISABLED", "true")
    received: list[list[dict[str, Any]]] = []
    handler = type("Handler", (Ingestion,), {"received": received})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    exporter = AzureMonitorMetricExporter(
        connection_string="InstrumentationKey=00000000-0000-0000-0000-000000000000;"
        f"IngestionEndpoint=http://127.0.0.1:{server.server_port}/",
        disable_offline_storage=True,
    )
    # Exports only when flushed: each flush is one of the distro's periodic exports.
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    yield provider, received
    provider.shutdown()
    server.shutdown()


def metric_rows(export: list[dict[str, Any]]) -> list[tuple[str, dict[str, str], float, str, str]]:
    """(name, properties, value, time, instance) of each envelope of the backlog, as
    ``customMetrics`` has them (``name``, ``customDimensions``, ``value``, ``timestamp``,
    ``cloud_RoleInstance``)."""
    rows = []
    for envelope in export:
        assert envelope["name"] == "Microsoft.ApplicationInsights.Metric"
        data = envelope["data"]["baseData"]
        [metric] = data["metrics"]
        if metric["name"] not in FIGURES | {PASSES}:
            continue  # the processing's own metrics
        rows.append(
            (
                metric["name"],
                data["properties"],
                metric["value"],
                envelope["time"],
                envelope["tags"]["ai.cloud.roleInstance"],
            )
        )
    return rows


async def test_a_pass_count_and_its_figures_leave_together_and_only_the_figures_repeat(
    exported: tuple[MeterProvider, list[Any]],
) -> None:
    # Given: a message parked at the stuck endpoint, measured by one cleanup pass
    provider, received = exported
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    suffix = unique_name("")[:8]
    harness = await Harness.create(
        backend, relay_and_stuck(suffix), max_dequeue_count=1, meter_provider=provider
    )
    relay, stuck = f"relay{suffix}", f"stuck{suffix}"
    await harness.setup_bus.client("http").send(Ping(key="a"), to=stuck, idempotency_key="a")
    [message] = await harness.raw.queue(stuck).receive()
    await harness.deliver(stuck, message)
    clock.advance(600)
    await cleanup_pass(
        harness.raw,
        harness.app,
        harness.config,
        CleanupSettings(checkpoint_table=unique_name("cleanup")),
        rows=harness.cleanup_rows(),
    )

    # When: the exporter sends twice, the pass between neither
    provider.force_flush()
    provider.force_flush()

    # Then: the first export carries the pass and its figures, with one time and instance
    first, second = (metric_rows(export) for export in received)
    assert {row[0] for row in first} == FIGURES | {PASSES}
    assert len({(row[3], row[4]) for row in first}) == 1
    parked = {row[1][DESTINATION]: row[2] for row in first if row[0] == PARKED}
    assert parked == {relay: 0, stuck: 1}
    for name in (IN_FLIGHT, OLDEST.name):
        assert {row[1][SENDER] for row in first if row[0] == name} == {relay, stuck, OUTSIDE}
    [passes] = [row for row in first if row[0] == PASSES]
    assert (passes[1], passes[2]) == ({}, 1)
    # and the second repeats the figures, later, without a pass: stale unless joined
    assert {row[0] for row in second} == FIGURES
    assert {row[3] for row in second} != {row[3] for row in first}
    assert {(row[0], json.dumps(row[1]), row[2]) for row in second} == {
        (row[0], json.dumps(row[1]), row[2]) for row in first if row[0] != PASSES
    }
