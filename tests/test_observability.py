"""The OpenTelemetry SDK set up at the app's edge from the environment (``shared.observability``).

Each case runs in a fresh interpreter, as the Functions worker starts: global providers can
be set once per process. The child sends and receives one message on the in-memory stores and
prints what ``configure()`` chose; the console exporter prints the spans it got.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import sample_provider_settings
from tests.fresh import run_fresh

REPO_ROOT = Path(__file__).resolve().parents[1]

ONE_MESSAGE = """
import asyncio, sys
from opentelemetry import metrics, trace
from shared import observability
from shared.bus import Bus, BusApp, Command, HandlerContext
from shared.provisioning import provision
from shared.resources import Resources
from shared.stores.memory import MemoryStorageAccount

print("CONFIGURED=" + observability.configure(), file=sys.stderr)
assert observability.configure() == observability.configure()  # once per process


class Ping(Command):
    partition_by = "key"
    key: str


app = BusApp()
pings = app.endpoint("pings")


@pings.handles(Ping)
def pong(ctx: HandlerContext, cmd: Ping) -> None:
    pass


async def main() -> None:
    account = MemoryStorageAccount()
    await provision(account, Resources({"tokens": "tokens", "topics": "topics"},
                                       {"ingress": "ingress"}, ("pings",)))
    bus = Bus(app, account)
    await bus.client().send(Ping(key="k"), to="pings", idempotency_key="k1")
    [message] = await account.queue("pings").receive(1, visibility_timeout=30)
    outcome = await bus.receive("pings", message.content)
    print("OUTCOME=" + outcome.value, file=sys.stderr)
    print("TRACER_PROVIDER=" + type(trace.get_tracer_provider()).__name__, file=sys.stderr)
    print("METER_PROVIDER=" + type(metrics.get_meter_provider()).__name__, file=sys.stderr)


asyncio.run(main())
"""


def run(script: str, **settings: str) -> tuple[dict[str, str], str]:
    """Run ``script`` with only ``settings`` of the telemetry ones; (its KEY=value lines on
    stderr, with the whole of it as STDERR; its stdout)."""
    result = run_fresh(script, settings, without=("OTEL_", "APPLICATIONINSIGHTS_", "BUS_"))
    assert result.returncode == 0, result.stderr
    lines = (line.partition("=") for line in result.stderr.splitlines() if "=" in line)
    found = {key: value for key, _, value in lines if key.isupper()}
    return {**found, "STDERR": result.stderr}, result.stdout


def console_spans(stdout: str) -> list[dict[str, object]]:
    """The spans the console exporter printed (one JSON document each)."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := stdout.find("{", at)) != -1:
        span, at = decoder.raw_decode(stdout, at)
        spans.append(span)
    return spans


def test_without_settings_nothing_is_set_up_and_messages_flow() -> None:
    found, stdout = run(ONE_MESSAGE)
    assert found["CONFIGURED"] == "none"
    assert found["OUTCOME"] == "processed"
    assert found["TRACER_PROVIDER"] == "ProxyTracerProvider"
    assert found["METER_PROVIDER"] == "_ProxyMeterProvider"
    assert stdout == ""


def test_otel_settings_choose_the_exporter_and_the_service_name() -> None:
    found, stdout = run(
        ONE_MESSAGE,
        OTEL_TRACES_EXPORTER="console",
        OTEL_SERVICE_NAME="pings-service",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
    )
    assert found["CONFIGURED"] == "otel"
    assert found["OUTCOME"] == "processed"
    assert found["TRACER_PROVIDER"] == "TracerProvider"
    assert found["METER_PROVIDER"] == "_ProxyMeterProvider"  # OTEL_METRICS_EXPORTER unset
    spans = console_spans(stdout)
    names = {str(s["name"]) for s in spans}
    assert {"ingress Ping", "receive pings", "handle Ping", "commit pings"} <= names
    assert {"create pings", "send pings"} <= names
    for span in spans:
        resource = span["resource"]
        assert isinstance(resource, dict)
        assert resource["attributes"]["service.name"] == "pings-service"
        assert resource["attributes"]["deployment.environment"] == "test"
    [receive] = [s for s in spans if s["name"] == "receive pings"]
    assert isinstance(receive["attributes"], dict)
    assert receive["attributes"]["bus.outcome"] == "processed"


def test_an_exporter_that_is_not_installed_is_logged_and_messages_still_flow() -> None:
    found, _ = run(ONE_MESSAGE, OTEL_TRACES_EXPORTER="no-such-exporter")
    assert "no traces exporter named 'no-such-exporter' is installed" in found["STDERR"]
    assert found["CONFIGURED"] == "none"
    assert found["OUTCOME"] == "processed"


@pytest.mark.parametrize(
    "settings",
    [
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
    ],
    ids=["sdk-disabled", "exporters-none"],
)
def test_disabled_telemetry_sets_up_nothing(settings: dict[str, str]) -> None:
    found, stdout = run(ONE_MESSAGE, **settings)
    assert found["CONFIGURED"] in {"disabled", "none"}
    assert found["TRACER_PROVIDER"] == "ProxyTracerProvider"
    assert stdout == ""


def test_metrics_go_to_the_exporter_otel_metrics_exporter_names() -> None:
    found, stdout = run(ONE_MESSAGE, OTEL_METRICS_EXPORTER="console")
    assert found["CONFIGURED"] == "otel"
    assert found["METER_PROVIDER"] == "MeterProvider"
    assert found["TRACER_PROVIDER"] == "ProxyTracerProvider"
    assert '"bus.messages.processed"' in stdout  # exported at shutdown


def test_an_application_insights_connection_string_sets_up_azure_monitor(tmp_path: Path) -> None:
    """With the setting the Bicep template gives the app, Azure Monitor's distro takes over
    (its ingestion endpoint here is a closed local port: nothing leaves the machine; what it
    keeps to retry goes to the temporary folder, this test's)."""
    found, _ = run(
        ONE_MESSAGE,
        APPLICATIONINSIGHTS_CONNECTION_STRING=(
            "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
            "IngestionEndpoint=http://127.0.0.1:9/;LiveEndpoint=http://127.0.0.1:9/"
        ),
        APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL="true",
        TMPDIR=str(tmp_path),
    )
    assert found["CONFIGURED"] == "azure-monitor"
    assert found["OUTCOME"] == "processed"
    assert found["TRACER_PROVIDER"] == "TracerProvider"
    assert found["METER_PROVIDER"] == "MeterProvider"


def test_the_function_app_sets_up_telemetry_when_it_starts() -> None:
    found, _ = run(
        "import sys\n"
        "import function_app\n"
        "from opentelemetry import trace\n"
        "print('TRACER_PROVIDER=' + type(trace.get_tracer_provider()).__name__, file=sys.stderr)",
        OTEL_TRACES_EXPORTER="console",
        **sample_provider_settings(),  # the sample's worker does not start without them
    )
    assert found["TRACER_PROVIDER"] == "TracerProvider"
