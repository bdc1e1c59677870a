"""The OpenTelemetry SDK, set up once at the app's edge from the environment.

The library (``shared.bus.telemetry``) only uses the OpenTelemetry API; this decides where
its spans and metrics go, from the standard settings:

- ``APPLICATIONINSIGHTS_CONNECTION_STRING`` set: Azure Monitor's distro
  (``configure_azure_monitor()``), which reads that setting, the identity-based
  ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` and the ``OTEL_*`` resource and sampler
  settings itself.
- otherwise ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (comma-separated exporter
  names, as installed exporter packages register them: ``console`` comes with the SDK, ``otlp``
  with ``opentelemetry-exporter-otlp``), or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` (then ``otlp``):
  the SDK's providers, whose resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``),
  sampler (``OTEL_TRACES_SAMPLER``), batching and export interval read their own settings.
- nothing of these, or ``OTEL_SDK_DISABLED=true``: nothing is set up and the API stays a no-op.

An exporter that is named but not installed is logged and left out: telemetry never stops
the worker from processing messages.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any, Literal

from opentelemetry import metrics, trace

log = logging.getLogger(__name__)

Configured = Literal["disabled", "none", "azure-monitor", "otel"]

_done: Configured | None = None


def configure() -> Configured:
    """Set up the SDK as the environment asks, once per process; says what it set up."""
    global _done
    if _done is None:
        _done = _configure(os.environ)
        log.info("telemetry: %s", _done)
    return _done


def _configure(environ: Mapping[str, str]) -> Configured:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "disabled"
    if environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING", "").strip():
        from azure.monitor.opentelemetry import configure_azure_monitor

        configure_azure_monitor()
        return "azure-monitor"
    span_exporters = _exporters(environ, "traces")
    metric_exporters = _exporters(environ, "metrics")
    if not span_exporters and not metric_exporters:
        return "none"
    _set_providers(span_exporters, metric_exporters)
    return "otel"


def _set_providers(span_exporters: list[Any], metric_exporters: list[Any]) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if span_exporters:
        tracer_provider = TracerProvider(resource=resource)
        for exporter in span_exporters:
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)
    if metric_exporters:
        readers = [PeriodicExportingMetricReader(e) for e in metric_exporters]
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))


def _exporters(environ: Mapping[str, str], signal: Literal["traces", "metrics"]) -> list[Any]:
    """The exporters ``OTEL_{SIGNAL}_EXPORTER`` names (``otlp`` if unset while an OTLP
    endpoint is), each created from its registered class, which reads its own settings."""
    named = environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip()
    if not named:
        endpoint = environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        named = "otlp" if endpoint else ""
    exporters = []
    for name in (n.strip() for n in named.split(",")):
        if not name or name == "none":
            continue
        found = entry_points(group=f"opentelemetry_{signal}_exporter", name=name)
        if not found:
            log.error(
                "telemetry: no %s exporter named %r is installed (OTEL_%s_EXPORTER); for "
                "otlp install opentelemetry-exporter-otlp",
                signal,
                name,
                signal.upper(),
            )
            continue
        exporters.append(next(iter(found)).load()())
    return exporters
