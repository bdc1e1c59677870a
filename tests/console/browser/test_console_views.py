"""The console in a real headless Chromium, on a desk app an operator would find in trouble:
the overview with every figure, the parked messages grouped and listed, one message whole,
values a sender chose shown as text and never run, and no data without the right token.
Nothing here changes the parked set: the module sets it up once."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from lab.local.azurite import AzuriteEndpoints
from shared.audit.published import PublishedAudit, publish
from shared.console.api import OVERVIEW_SECONDS
from shared.resources import CONTAINERS, poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.console.browser.desk import DeskStorage, blocking, synthetic_parked
from tests.console.browser.desk_app import BOOKINGS, NOTE_HEADER, TALLY
from tests.console.browser.tab import (
    HOSTILE,
    OPERATOR,
    Tab,
    desk_console,
    shown_range,
    text_of,
)
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite

HOSTILE_TYPE = f"Refund{HOSTILE}"
REMIND_SECONDS = 3600


@pytest.fixture(scope="module")
def trouble(desk: DeskStorage) -> dict[str, str]:
    """Four processed bookings, one that set a reminder an hour ahead, two Books that failed
    (one quoting markup in its reason and body), one Booked that failed at tally (markup in
    its header), ten parked messages written directly (six of a hostile type), and one Book
    waiting. The message ids, by what they are."""
    desk.clear()
    for i in range(4):
        desk.book(f"ok-{i}")
    desk.book("later", remind_after_seconds=REMIND_SECONDS)
    desk.process(BOOKINGS)
    desk.process(TALLY)
    ids = {
        "script": desk.fail("bad-script", note=HOSTILE),
        "card": desk.fail("bad-card", note="card expired"),
    }
    desk.fail_tally("bad-count", note=HOSTILE)
    desk.park(
        BOOKINGS,
        [
            synthetic_parked(
                BOOKINGS,
                f"s-{i}",
                message_type=HOSTILE_TYPE if i < 6 else "Book",
                error_type="KeyError" if i < 6 else "TimeoutError",
                reason=f"KeyError: {HOSTILE}" if i < 6 else "TimeoutError: the desk was slow",
            )
            for i in range(10)
        ],
    )
    ids["waiting"] = desk.book("waiting")
    return ids


@pytest.fixture(scope="module")
def console(
    trouble: dict[str, str], emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    with desk_console(tmp_path_factory.mktemp("desk"), emulator) as running:
        yield running


@pytest.fixture(scope="module")
def read_only_console(
    trouble: dict[str, str], emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    with desk_console(tmp_path_factory.mktemp("desk-ro"), emulator, "--read-only") as running:
        yield running


def math_round(value: float) -> int:
    """``value`` rounded as the page's ``Math.round`` does: halves up. (Python's ``round``
    takes halves to the even neighbour, and a median of two whole milliseconds is often a
    half: 356.5 is 357 on the page, 356 by ``round``.)"""
    return math.floor(value + 0.5)


def overview_of(console: RunningConsole) -> dict[str, Any]:
    answer = console.get("/api/overview")
    assert answer.status == 200, answer.body
    overview: dict[str, Any] = answer.json()
    return overview


def test_the_overview_shows_every_endpoint_with_its_figures(
    tab: Tab, console: RunningConsole, trouble: dict[str, str]
) -> None:
    tab.open(console)
    table = tab.page.locator("#endpoint-table")
    expect(table).to_be_visible()

    served = overview_of(console)
    assert [e["name"] for e in served["endpoints"]] == [BOOKINGS, TALLY]
    for endpoint in served["endpoints"]:
        row = table.locator(f'tr[data-endpoint="{endpoint["name"]}"]')
        for figure in ("queue_depth", "poison_count", "tokens_in_flight", "delayed_count"):
            expect(row.locator(f'[data-figure="{figure}"]')).to_have_text(str(endpoint[figure]))
        expect(row.locator("td").first).to_have_text(endpoint["mode"])
        processed = sum(m["count"] for m in endpoint["processed_last_minutes"])
        chart = row.locator('[data-figure="processed"]')
        expect(chart.locator("rect")).to_have_count(len(endpoint["processed_last_minutes"]))
        expect(chart.locator(".total")).to_have_text(str(processed))
        expect(row.locator('[data-figure="p50"]')).to_have_text(
            f"{math_round(endpoint['latency_ms']['p50'])} ms"
        )
    bookings = table.locator(f'tr[data-endpoint="{BOOKINGS}"]')
    expect(bookings.locator('[data-figure="poison_count"]')).to_have_text("12")
    expect(bookings.locator('[data-figure="delayed_count"]')).to_have_text("1")
    expect(bookings.locator('[data-figure="next_due"]')).to_contain_text("Remind")
    # ok-0..3, later and bad-count processed (a failure commits nothing); at tally, all but
    # bad-count's Booked.
    expect(bookings.locator('[data-figure="processed"] .total')).to_have_text("6")
    tally = table.locator(f'tr[data-endpoint="{TALLY}"]')
    expect(tally.locator('[data-figure="poison_count"]')).to_have_text("1")
    expect(tally.locator('[data-figure="processed"] .total')).to_have_text("5")
    topic = tab.page.locator("#recipients tbody tr")
    expect(topic.locator("th, td")).to_have_text(["booked", TALLY])  # Booked's topic
    expect(tab.page.locator("#audit")).to_contain_text("No audit report.")
    expect(tab.page.locator("#sessions, #sessions-waiting")).to_have_count(0)  # none taken
    expect(tab.page.locator("#who")).to_have_text(f"signed in as {OPERATOR}")


def test_the_token_leaves_the_address_bar_for_the_session(
    tab: Tab, console: RunningConsole
) -> None:
    tab.open(console)
    expect(tab.page.locator("#endpoint-table")).to_be_visible()

    assert "token" not in tab.page.url
    assert tab.page.evaluate("() => sessionStorage.getItem('bus-console-token')") == console.token
    tab.page.reload()  # the session keeps it: the page still reads the API
    expect(tab.page.locator("#endpoint-table")).to_be_visible()


def test_a_function_key_in_the_address_is_sent_as_a_header_on_every_api_request(
    tab: Tab, console: RunningConsole
) -> None:
    """Deployed, the platform checks a function key: the page forwards the ``code`` of its
    own address as ``x-functions-key`` (the local server does not need it, and ignores it)."""
    sent: list[dict[str, str]] = []
    tab.page.on(
        "request", lambda request: sent.append(request.headers) if "/api/" in request.url else None
    )
    tab.page.goto(f"{console.base}/?code=the-function-key&token={console.token}#/failed")
    expect(tab.page.locator("#groups tbody tr")).not_to_have_count(0)

    assert len(sent) >= 2  # the session, then the groups
    for headers in sent:
        assert headers["x-functions-key"] == "the-function-key"
        assert headers["authorization"] == f"Bearer {console.token}"
    assert tab.page.url == f"{console.base}/?code=the-function-key#/failed"  # kept for reloads


def test_parked_messages_are_grouped_by_endpoint_type_and_error(
    tab: Tab, console: RunningConsole, trouble: dict[str, str]
) -> None:
    tab.open(console, route="#/failed")
    groups = tab.page.locator("#groups tbody tr")

    expect(groups).to_have_count(4)
    counts = {
        tuple(text_of(groups.nth(i).locator("td").nth(c)) for c in range(4))
        for i in range(groups.count())
    }
    assert counts == {
        (BOOKINGS, "Book", "RuntimeError", "2"),
        (BOOKINGS, HOSTILE_TYPE, "KeyError", "6"),
        (BOOKINGS, "Book", "TimeoutError", "4"),
        (TALLY, "Booked", "ValueError", "1"),
    }
    expect(tab.page.locator("#groups h2")).to_contain_text("(13)")

    tab.row("#groups", "TimeoutError").get_by_role("link", name="4").click()
    listed = tab.page.locator("#failed-list tbody tr")
    expect(listed).to_have_count(4)
    expect(tab.page.locator("#failed-list .pager .position").first).to_have_text(
        shown_range(1, 4, 4)
    )
    assert {text_of(listed.nth(i).locator("td").nth(1)) for i in range(4)} == {
        f"s-{i}" for i in range(6, 10)
    }


def test_one_message_shows_its_body_headers_reason_and_history(
    tab: Tab, console: RunningConsole, trouble: dict[str, str]
) -> None:
    tab.open(console, route=f"#/parked?endpoint={TALLY}")
    tab.page.locator("#failed-list tbody tr a.id").click()

    message = tab.page.locator("#message")
    expect(message.locator("h2")).to_contain_text(TALLY)
    expect(message.locator("dd").nth(1)).to_have_text("Booked")
    expect(tab.page.locator("#reason")).to_have_text("ValueError: cannot count bad-count")
    body = json.loads(tab.page.locator("#body").inner_text())
    assert body["ref"] == "bad-count"
    header = tab.row("#message", NOTE_HEADER)
    expect(header.locator("td")).to_have_text(HOSTILE)
    expect(message.locator("ol.history li")).not_to_have_count(0)
    expect(message.get_by_role("button", name="Replay")).to_be_visible()


def test_values_a_sender_chose_show_as_text_and_never_run(
    tab: Tab, console: RunningConsole, trouble: dict[str, str]
) -> None:
    """Markup in a reason, a message type, a body and a header, on every view that shows
    them: shown as the characters it is, no element made of it, no script or handler run."""
    tab.open(console, route="#/failed")
    expect(tab.row("#groups", HOSTILE_TYPE)).to_have_count(1)
    expect(tab.page.locator("#groups").get_by_text(f"KeyError: {HOSTILE}")).to_have_count(1)

    tab.go(f"#/parked?endpoint={BOOKINGS}")
    expect(tab.page.locator("#failed-list tbody tr")).to_have_count(12)
    expect(tab.page.locator("#failed-list").get_by_text(HOSTILE_TYPE, exact=True)).to_have_count(6)

    tab.go(f"#/message/{BOOKINGS}/{queue_message_id(console, BOOKINGS, trouble['script'])}")
    expect(tab.page.locator("#reason")).to_have_text(f"RuntimeError: refused bad-script: {HOSTILE}")
    assert json.loads(tab.page.locator("#body").inner_text())["note"] == HOSTILE

    tab.go(f"#/parked?endpoint={TALLY}")
    tab.page.locator("#failed-list tbody tr a.id").click()
    expect(tab.row("#message", NOTE_HEADER).locator("td")).to_have_text(HOSTILE)

    assert tab.page.locator("main img, main script").count() == 0
    assert tab.script_ran() is None
    assert tab.dialogs == []


def queue_message_id(console: RunningConsole, endpoint: str, message_id: str) -> str:
    answer = console.get(f"/api/failed?endpoint={endpoint}&size=200")
    [found] = [m["id"] for m in answer.json()["messages"] if m["message_id"] == message_id]
    return str(found)


def test_a_message_gone_meanwhile_shows_the_error_and_nothing_left_from_before(
    tab: Tab, console: RunningConsole, trouble: dict[str, str]
) -> None:
    tab.open(console, route="#/failed")
    expect(tab.page.locator("#groups tbody tr")).to_have_count(4)

    tab.go(f"#/message/{BOOKINGS}/00000000-0000-0000-0000-000000000000")

    expect(tab.page.locator("#banner-text")).to_contain_text("404")
    expect(tab.page.locator("main")).to_have_text("")
    tab.page.get_by_role("link", name="Failed messages").click()  # the way back
    expect(tab.page.locator("#groups tbody tr")).to_have_count(4)
    expect(tab.page.locator("#banner")).to_be_hidden()


@pytest.mark.parametrize("token", ["wrong-token", None], ids=["wrong", "missing"])
def test_without_the_right_token_the_page_shows_an_error_and_no_data(
    tab: Tab, console: RunningConsole, token: str | None
) -> None:
    tab.open(console, token=token, route="#/failed")

    expect(tab.page.locator("#banner")).to_be_visible()
    expect(tab.page.locator("#banner-text")).to_contain_text("401")
    expect(tab.page.locator("main")).to_have_text("")
    expect(tab.page.locator("#app-name")).to_have_text("")
    tab.go("#/overview")
    expect(tab.page.locator("#banner-text")).to_contain_text("401")
    assert tab.page.locator("main table").count() == 0


def test_a_read_only_console_offers_no_action_and_refuses_a_forged_one(
    tab: Tab, read_only_console: RunningConsole, desk: DeskStorage, trouble: dict[str, str]
) -> None:
    tab.open(read_only_console, route="#/failed")
    expect(tab.page.locator("#groups tbody tr")).to_have_count(4)

    expect(tab.page.locator("#read-only")).to_be_visible()
    expect(tab.page.locator("main button")).to_have_count(0)
    tab.go(f"#/parked?endpoint={BOOKINGS}")
    tab.page.locator("#failed-list tbody tr a.id").first.click()
    expect(tab.page.locator("#body")).to_be_visible()
    expect(tab.page.locator("main button")).to_have_count(0)

    # The page's own credentials and CSRF value, posted by hand: the server still refuses.
    forged = tab.page.evaluate(
        """async (endpoint) => {
            const token = sessionStorage.getItem('bus-console-token');
            const auth = { Authorization: `Bearer ${token}` };
            const session = await (await fetch('/api/session', { headers: auth })).json();
            const answer = await fetch('/api/replay', {
                method: 'POST',
                headers: { ...auth, 'Content-Type': 'application/json',
                           'X-Console-CSRF': session.csrf },
                body: JSON.stringify({ endpoint, type: 'Book', error_type: 'TimeoutError' }),
            });
            return { status: answer.status, body: await answer.json() };
        }""",
        BOOKINGS,
    )
    assert forged["status"] == 403
    assert "read-only" in forged["body"]["error"]
    assert desk.depth(poison_queue(BOOKINGS)) == 12


def test_the_last_audit_shows_its_verdict_and_summary_as_text(
    tab: Tab, console: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    """What an audit published (a blob anyone with write access to the container could have
    written): its summary shown as the characters it is."""
    summary = f"audit: sent=6 processed=6 {HOSTILE} verdict=PASS"
    at = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
    published = PublishedAudit(at=at, verdict="PASS", summary=summary)
    blocking(lambda: _published(emulator, published))
    try:
        time.sleep(OVERVIEW_SECONDS + 0.5)  # the overview is kept a few seconds for every tab
        tab.open(console)
        expect(tab.page.locator("#audit pre.summary")).to_have_text(summary)
        expect(tab.page.locator("#audit .badge")).to_have_text("PASS")
        expect(tab.page.locator("#audit time")).to_have_text("2026-11-26 09:30:00 UTC")
        assert tab.page.locator("main img, main script").count() == 0
        assert tab.script_ran() is None
    finally:
        blocking(lambda: _published(emulator, None))


async def _published(emulator: AzuriteEndpoints, audit: PublishedAudit | None) -> None:
    """Publish ``audit``, or remove what was published."""
    async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
        container = account.blob_container(CONTAINERS["audits"])
        if audit is None:
            await container.delete_container()
        else:
            await publish(container, audit, "<html>report</html>")
