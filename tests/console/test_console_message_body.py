"""One parked message's view answers a bounded prefix of its body with the body's full size;
the whole body is a download of its own, never shown by the browser."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus.envelope import Signal
from shared.bus.poison import unwrap
from shared.console.failed import BODY_PREFIX_CHARS
from shared.resources import CONTAINERS, poison_queue
from tests.console.parking import account, clear, park_sent_order
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
    assert int(whole.headers["Content-Length"]) == len(whole.body)  # streamed, its length told
    downloaded = json.loads(whole.body)  # the body as the message holds it (compact JSON)
    assert downloaded["customer"] == "x" * LARGE
    assert json.dumps(downloaded, indent=2, ensure_ascii=False).startswith(shown["body"])


def test_an_altered_token_is_never_downloaded_as_the_body(
    console: RunningConsole, emulator: AzuriteEndpoints, project: Path
) -> None:
    """Whoever may write a token rewrites it after the message was parked: the download
    refuses it (the old download answered 200, the body empty, as if there were none)."""
    clear(emulator, "orders")
    park_sent_order(emulator, project, "order-forged", "y" * LARGE, "handler failed")
    [listed] = console.get("/api/failed?endpoint=orders").json()["messages"]
    asyncio.run(rewrite_token(emulator, b'"order-forged"', b'"order-f0rged"'))

    whole = console.get(f"/api/failed/orders/{listed['id']}/body")

    assert whole.status == 409, whole.body
    assert b"y" * 100 not in whole.body
    assert "altered" in whole.json()["error"]
    assert whole.headers["Content-Type"].startswith("application/json")


async def rewrite_token(emulator: AzuriteEndpoints, old: bytes, new: bytes) -> None:
    """The parked signal's token, its bytes replaced: its name's digest no longer matches."""
    async with account(emulator) as storage:
        [message] = await storage.queue(poison_queue("orders")).peek(1)
        poisoned = unwrap(message.content, "orders")
        token = Signal.parse(poisoned.signal or "").token
        tokens = storage.blob_container(CONTAINERS["tokens"])
        data = (await tokens.read(token)).data
        assert old in data
        await tokens.upload(token, data.replace(old, new))


def test_the_body_of_a_message_not_parked_or_another_part_is_404(
    console: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    clear(emulator, "orders")

    assert console.get("/api/failed/orders/no-such-id/body").status == 404
    assert console.get("/api/failed/orders/no-such-id/other").status == 404
    assert console.get("/api/failed/orders/no-such-id/body/more").status == 404
