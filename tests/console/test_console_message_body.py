"""One parked message's view answers a bounded prefix of its body with the body's full size;
the whole body is a download of its own, never shown by the browser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.console.failed import BODY_PREFIX_CHARS
from tests.console.parking import clear, park_sent_order
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite

LARGE = 100_000
"""Characters of the customer name: one command-line argument holds at most 128 KiB."""


def test_a_large_body_is_answered_as_a_prefix_with_its_size_and_downloaded_whole(
    console: RunningConsole, emulator: AzuriteEndpoints, project: Path
) -> None:
    clear(emulator, "orders")
    park_sent_order(emulator, project, "order-big", "x" * LARGE, "handler failed")
    [listed] = console.get("/api/failed?endpoint=orders").json()["messages"]

    view = console.get(f"/api/failed/orders/{listed['id']}")
    whole = console.get(f"/api/failed/orders/{listed['id']}/body")

    assert view.status == 200, view.body
    shown = view.json()
    assert len(shown["body"]) == BODY_PREFIX_CHARS
    assert shown["body_chars"] > LARGE
    assert len(view.body) < 3 * BODY_PREFIX_CHARS  # the answer, not the body, is bounded
    assert whole.status == 200, whole.body
    assert whole.headers["Content-Type"] == "application/octet-stream"
    assert whole.headers["Content-Disposition"].startswith("attachment;")
    assert whole.headers["X-Content-Type-Options"] == "nosniff"
    text = whole.body.decode("utf-8")
    assert len(text) == shown["body_chars"]
    assert text.startswith(shown["body"])
    assert json.loads(text)["customer"] == "x" * LARGE


def test_the_body_of_a_message_not_parked_or_another_part_is_404(
    console: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    clear(emulator, "orders")

    assert console.get("/api/failed/orders/no-such-id/body").status == 404
    assert console.get("/api/failed/orders/no-such-id/other").status == 404
    assert console.get("/api/failed/orders/no-such-id/body/more").status == 404
