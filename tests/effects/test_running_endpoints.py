"""Tools that read an app without building a worker still see the performer it runs: the
audit reads the performer's audit rows too, or every answer it sent would look like a ghost."""

from __future__ import annotations

from shared.audit.cli import _tables, build_parser
from shared.bus import BusApp
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.effects.memory import InMemoryProvider
from shared.effects.performer import add_performer


def test_an_app_that_declares_services_runs_the_performer_too() -> None:
    app = BusApp()
    app.endpoint("orders")
    assert app.running_endpoints() == ["orders"]

    app.service("payments", operations={"charge": "/c"})
    assert app.running_endpoints() == ["orders", PERFORMER_ENDPOINT]

    add_performer(app, {"payments": InMemoryProvider()}, call_timeout=1.0)
    assert app.running_endpoints() == ["orders", PERFORMER_ENDPOINT]  # once, when added


def test_the_audit_reads_the_performers_table_by_default() -> None:
    args = build_parser().parse_args(["run", "--app", "shared.sample.app:app"])

    endpoints, _ = _tables(args)

    assert PERFORMER_ENDPOINT in endpoints
    assert {"orders", "payments", "shipping"} <= set(endpoints)
