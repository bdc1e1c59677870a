"""``bus console``'s session and overview over real HTTP, on the sample app in Azurite."""

from __future__ import annotations

import pytest

from shared.console.headers import CONTENT_SECURITY_POLICY
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite


def test_the_session_names_who_acts_and_gives_a_csrf_value(console: RunningConsole) -> None:
    session = console.session()
    assert session["who"] == "ada"
    assert session["read_only"] is False
    assert session["app"] == "shared.sample.app:app"
    assert len(session["csrf"]) == 64


def test_the_overview_lists_every_endpoint_with_its_figures(console: RunningConsole) -> None:
    answer = console.get("/api/overview")
    assert answer.status == 200
    assert answer.headers["Cache-Control"] == "no-store"
    overview = answer.json()
    names = [e["name"] for e in overview["endpoints"]]
    assert {"orders", "payments"} <= set(names)
    orders = next(e for e in overview["endpoints"] if e["name"] == "orders")
    assert orders["queue_depth"] == 0
    assert orders["poison_count"] == 0
    assert orders["tokens_in_flight"] == 0
    assert orders["oldest_token_age_seconds"] is None
    assert len(orders["processed_last_minutes"]) == 15
    assert overview["audit"] is None


def test_the_page_is_served_with_its_security_headers(console: RunningConsole) -> None:
    page = console.get("/", token=None)
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    script = console.get("/console.js", token=None)
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert script.headers["X-Content-Type-Options"] == "nosniff"
