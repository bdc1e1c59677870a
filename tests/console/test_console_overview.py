"""``bus console``'s session and overview over real HTTP, on the sample app in Azurite."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.audit.published import LATEST, MAX_LATEST_BYTES, PublishedAudit, publish
from shared.console.api import OVERVIEW_SECONDS
from shared.console.headers import CONTENT_SECURITY_POLICY
from shared.resources import CONTAINERS
from shared.runtime import Worker
from shared.sample.app import PlaceOrder
from shared.sample.app import app as sample_app
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import sample_settings
from tests.console.running import RunningConsole, console_environ

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


async def process_everything(worker: Worker) -> int:
    """Deliver every queued signal to its endpoint, as the Functions host would, until the
    queues are quiet; how many were delivered."""
    account, delivered = worker.account(), 0
    for _ in range(20):
        busy = False
        for endpoint in worker.app.endpoints:
            queue = account.queue(endpoint)
            for message in await queue.receive(32, visibility_timeout=30):
                busy = True
                await worker.receive(endpoint, message.content.encode(), message.dequeue_count)
                await queue.delete(message.id, message.pop_receipt)
                delivered += 1
        if not busy:
            return delivered
    return delivered


async def order_and_delay(connection_string: str) -> tuple[int, datetime]:
    """One order placed and processed through the sample app, and one sent due in an hour
    (left in flight); what was delivered, and when the second is due."""
    worker = Worker(sample_app, sample_settings(AzureWebJobsStorage=connection_string))
    try:
        await worker.bus().subscribe_all()
        client = worker.bus().client("cli")
        now = datetime.now(UTC)
        await client.send(
            PlaceOrder(order_id="ov-1", customer="ada", amount_cents=100),
            to="orders",
            idempotency_key="ov-1",
        )
        delivered = await process_everything(worker)
        await client.send(
            PlaceOrder(order_id="ov-2", customer="bob", amount_cents=100),
            to="orders",
            idempotency_key="ov-2",
            delay=timedelta(hours=1),
        )
        return delivered, now + timedelta(hours=1)
    finally:
        await worker.close()


def eventually(console: RunningConsole, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The overview once ``done`` holds for it (it is kept a few seconds for every tab)."""
    deadline = time.monotonic() + OVERVIEW_SECONDS * 3
    while True:
        overview: dict[str, Any] = console.get("/api/overview").json()
        if done(overview) or time.monotonic() > deadline:
            return overview
        time.sleep(0.5)


def endpoint(overview: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in overview["endpoints"] if e["name"] == name)
    return found


def test_processing_shows_as_throughput_and_latency_and_a_delayed_message_as_due(
    console: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    delivered, due = asyncio.run(order_and_delay(emulator.connection_string))

    overview = eventually(console, lambda o: any(s["sender"] == "cli" for s in o["other_senders"]))

    assert delivered >= 3  # the order, its charge and what followed
    orders = endpoint(overview, "orders")
    # The order's PlaceOrder, and the OrderShipped that completed its checkout
    assert sum(m["count"] for m in orders["processed_last_minutes"]) == 2
    assert orders["latency_ms"]["p50"] is not None
    assert orders["latency_ms"]["p50"] >= 0
    assert orders["throughput_complete"] is True
    assert orders["queue_depth"] == 1  # the delayed message's signal, hidden until it is due
    [cli] = [s for s in overview["other_senders"] if s["sender"] == "cli"]
    assert (cli["tokens_in_flight"], cli["delayed_count"]) == (1, 1)
    assert cli["oldest_token_age_seconds"] is None  # the only one is not due yet
    [next_due] = cli["next_due"]
    assert (next_due["type"], next_due["to"]) == ("PlaceOrder", "orders")
    assert abs(datetime.fromisoformat(next_due["due_at"]) - due) < timedelta(minutes=1)
    lists = {r["topic"]: r["endpoints"] for r in overview["recipients"]}
    assert lists["orderplaced"] == ["loyalty", "shipping"]


def test_bus_console_refuses_to_start_without_a_name_for_who_acts(
    project: Path, emulator: AzuriteEndpoints
) -> None:
    environ = console_environ(emulator.connection_string)
    started = subprocess.run(
        [sys.executable, "-m", "shared.cli", "console", "--port", "0", "--by", " "],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert started.returncode == 2
    assert started.stdout == ""
    assert "--by names who acts" in started.stderr


def test_the_overview_shows_the_verdict_the_last_audit_published(
    console: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    audits = CONTAINERS["audits"]
    verdict = PublishedAudit(
        at=datetime(2026, 11, 26, 9, 30, tzinfo=UTC),
        verdict="WARN",
        summary="audit: sent=3 processed=3 <script>alert(1)</script> verdict=WARN",
    )

    async def write(data: bytes | None) -> None:
        async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
            container = account.blob_container(audits)
            if data is None:
                await publish(container, verdict, "<html>report</html>")
            else:
                await container.upload(LATEST, data)

    try:
        asyncio.run(write(None))
        shown = eventually(console, lambda o: o["audit"] is not None)["audit"]
        assert shown == {
            "at": "2026-11-26T09:30:00+00:00",
            "verdict": "WARN",
            "summary": verdict.summary,  # as text, whatever it holds: the page escapes it
        }

        asyncio.run(write(b'{"verdict": "PASS"}'))  # written by hand: no time, no summary
        forged = eventually(console, lambda o: o["audit"]["verdict"] != "WARN")["audit"]
        assert forged["verdict"] == "UNREADABLE"

        asyncio.run(write(b" " * (MAX_LATEST_BYTES + 1)))
        unreadable = eventually(console, lambda o: "more than" in o["audit"]["summary"])["audit"]
        assert unreadable["verdict"] == "UNREADABLE"
        assert "more than" in unreadable["summary"]
    finally:
        asyncio.run(_remove_audits(emulator))


async def _remove_audits(emulator: AzuriteEndpoints) -> None:
    async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
        await account.blob_container(CONTAINERS["audits"]).delete_container()
