"""Replaying and discarding from the console in a real headless Chromium: one message, a
group in three clicks, a discard that needs its reason, each recorded with who in the
journal; and a forged action from another site that changes nothing. Each test sets up its
own parked messages on the desk app (the queues emptied first)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Route, expect

from lab.local.azurite import AzuriteEndpoints
from shared.bus.pipeline import Outcome
from shared.bus.poison import Reason, excerpt_body
from shared.resources import poison_queue
from tests.console.browser.desk import DeskStorage, synthetic_parked
from tests.console.browser.desk_app import BOOKINGS, OUTAGES
from tests.console.browser.tab import HOSTILE, OPERATOR, Tab, desk_console, text_of
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite

PRINTER = "printer"


@pytest.fixture(scope="module")
def console(
    desk: DeskStorage, emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    with desk_console(tmp_path_factory.mktemp("desk"), emulator) as running:
        yield running


@pytest.fixture
def outage(desk: DeskStorage) -> Iterator[DeskStorage]:
    """Empty queues, and the printer down until the test ends the outage."""
    desk.clear()
    OUTAGES.add(PRINTER)
    yield desk
    OUTAGES.discard(PRINTER)


def fail_for_the_printer(desk: DeskStorage, ref: str) -> str:
    message_id = desk.book(ref, needs=PRINTER)
    assert desk.process(BOOKINGS, last_try=True) == [Outcome.POISONED]
    return message_id


def slow_desk(i: int) -> str:
    return synthetic_parked(
        BOOKINGS,
        f"slow-{i}",
        message_type="Book",
        error_type="TimeoutError",
        reason="TimeoutError: the desk was slow",
    )


def journal_rows(tab: Tab) -> list[list[str]]:
    tab.go("#/actions")
    rows = tab.page.locator("#journal tbody tr[data-action]")
    expect(rows.first).to_be_visible()
    return [
        [text_of(cell) for cell in rows.nth(i).locator("td").all()] for i in range(rows.count())
    ]


def test_replaying_one_message_sends_it_back_to_be_processed_once(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    message_id = fail_for_the_printer(outage, "r-1")
    OUTAGES.discard(PRINTER)  # fixed: the operator replays it
    tab.open(console, route=f"#/parked?endpoint={BOOKINGS}")

    tab.page.locator("#failed-list tbody tr a.id").click()
    expect(tab.page.locator("#message dd.id")).to_have_text(message_id)
    queue_message_id = tab.page.locator("#message h2 .id").inner_text()
    tab.page.get_by_role("button", name="Replay").click()

    expect(tab.page.locator("#notice-text")).to_contain_text("Replayed 1 of message ")
    expect(tab.page.locator("#failed-list tbody td.empty")).to_have_text(
        "No parked message matches."
    )
    assert outage.depth(poison_queue(BOOKINGS)) == 0
    assert outage.process(BOOKINGS) == [Outcome.PROCESSED]
    assert outage.process(BOOKINGS) == []  # sent back once
    entry = journal_rows(tab)[0]  # the newest
    assert entry[1:4] == [OPERATOR, "replay", BOOKINGS]
    assert entry[4] == f"ids {queue_message_id}"
    assert entry[5] == "1"
    assert tab.dialogs == []


def test_a_group_is_replayed_in_three_clicks_and_the_others_stay(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    for i in range(3):
        fail_for_the_printer(outage, f"g-{i}")
    outage.park(BOOKINGS, [slow_desk(i) for i in range(2)])
    OUTAGES.discard(PRINTER)
    tab.open(console)
    expect(tab.page.locator("#endpoint-table")).to_be_visible()

    tab.page.get_by_role("link", name="Failed messages").click()  # 1
    tab.row("#groups", "ConnectionError").get_by_role("button", name="Replay").click()  # 2
    expect(tab.page.locator("#confirm-text")).to_contain_text("(3)")
    tab.page.locator("#confirm-ok").click()  # 3

    expect(tab.page.locator("#notice-text")).to_contain_text("Replayed 3 of every parked")
    expect(tab.page.locator("#groups tbody tr")).to_have_count(1)
    expect(tab.row("#groups", "TimeoutError").locator("td").nth(3)).to_have_text("2")
    assert outage.process(BOOKINGS) == [Outcome.PROCESSED] * 3
    entry = journal_rows(tab)[0]
    assert entry[1:4] == [OPERATOR, "replay", BOOKINGS]
    assert "ConnectionError" in entry[4]
    assert entry[5] == "3"


def test_the_filtered_list_is_replayed_as_a_whole_and_nothing_else(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    fail_for_the_printer(outage, "f-1")
    outage.park(BOOKINGS, [slow_desk(i) for i in range(3)])
    tab.open(console, route=f"#/parked?endpoint={BOOKINGS}")
    expect(tab.page.locator("#failed-list tbody tr")).to_have_count(4)
    expect(tab.page.get_by_role("button", name="Replay these 4")).to_have_count(0)  # a queue

    tab.page.locator("#filters input[name=error]").fill("TimeoutError")
    tab.page.get_by_role("button", name="Filter").click()
    tab.page.get_by_role("button", name="Replay these 3").click()
    expect(tab.page.locator("#confirm-text")).to_contain_text("that failed with TimeoutError")
    tab.page.locator("#confirm-ok").click()

    expect(tab.page.locator("#notice-text")).to_contain_text("Replayed 3 of every parked")
    expect(tab.page.locator("#failed-list tbody td.empty")).to_be_visible()
    assert outage.depth(poison_queue(BOOKINGS)) == 1  # the printer's failure stays
    assert outage.depth(BOOKINGS) == 3
    entry = journal_rows(tab)[0]
    assert entry[1:4] == [OPERATOR, "replay", BOOKINGS]
    assert (entry[4], entry[5]) == ("error type TimeoutError", "3")


def test_a_message_that_cannot_be_replayed_stays_parked_and_the_page_says_why(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    refused = Reason(BOOKINGS, "not a signal", 1, error_type="MalformedSignal")
    outage.park(BOOKINGS, [excerpt_body("x" * 70_000, refused)])  # only an excerpt was kept
    tab.open(console, route="#/failed")

    tab.row("#groups", "MalformedSignal").get_by_role("button", name="Replay").click()
    tab.page.locator("#confirm-ok").click()

    notice = tab.page.locator("#notice-text")
    expect(notice).to_contain_text("Replayed 0 of every parked")
    expect(notice).to_contain_text("1 could not be replayed and stay parked")
    expect(notice).to_contain_text("only an excerpt of it was kept")
    assert outage.depth(poison_queue(BOOKINGS)) == 1


def test_a_cancelled_confirmation_replays_nothing(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    outage.park(BOOKINGS, [slow_desk(i) for i in range(2)])
    tab.open(console, route="#/failed")

    tab.row("#groups", "TimeoutError").get_by_role("button", name="Replay").click()
    tab.page.get_by_role("button", name="Cancel").click()

    expect(tab.page.locator("#confirm-dialog")).not_to_be_visible()
    assert outage.depth(poison_queue(BOOKINGS)) == 2
    assert outage.depth(BOOKINGS) == 0


def test_discarding_needs_a_reason_and_keeps_the_message_in_the_archive(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    message_id = fail_for_the_printer(outage, "d-1")
    outage.park(BOOKINGS, [slow_desk(i) for i in range(2)])
    tab.open(console, route=f"#/parked?endpoint={BOOKINGS}&type=Book&error=ConnectionError")
    tab.page.locator("#failed-list tbody tr a.id").click()

    tab.page.get_by_role("button", name="Discard…").click()
    tab.page.locator("#discard-ok").click()  # no reason: the dialog stays
    expect(tab.page.locator("#discard-dialog")).to_be_visible()
    tab.page.locator("#discard-reason").fill("the customer booked again by phone")
    tab.page.locator("#discard-ok").click()

    expect(tab.page.locator("#notice-text")).to_contain_text("Discarded 1 of message")
    expect(tab.page.locator("#failed-list tbody tr")).to_have_count(2)
    [entry] = list(outage.archived())
    assert entry["reason"] == "the customer booked again by phone"
    assert entry["by"] == OPERATOR
    assert entry["keep_until_metadata"]
    assert json.loads(entry["content"])["poison"]["message_id"] == message_id

    tab.go("#/failed")
    tab.row("#groups", "TimeoutError").get_by_role("button", name="Discard…").click()
    expect(tab.page.locator("#discard-text")).to_contain_text("(2)")
    tab.page.locator("#discard-reason").fill("the desk answered these by hand")
    tab.page.locator("#discard-ok").click()

    expect(tab.page.locator("#notice-text")).to_contain_text("Discarded 2 of every parked")
    expect(tab.page.locator("#groups tbody td.empty")).to_have_text("Nothing is parked.")
    assert outage.depth(poison_queue(BOOKINGS)) == 0
    assert len(list(outage.archived())) == 3
    newest, oldest = journal_rows(tab)[:2]
    assert newest[1:4] == [OPERATOR, "discard", BOOKINGS]
    assert (newest[5], newest[6]) == ("2", "the desk answered these by hand")
    assert (oldest[5], oldest[6]) == ("1", "the customer booked again by phone")


def test_an_action_on_a_hostile_group_shows_its_type_and_reason_as_text_everywhere(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    """The confirmation, the answer and the journal quote the group's type and the reason
    typed: markup in them is shown as it is and runs nowhere."""
    hostile_type = f"Refund{HOSTILE}"
    parked = synthetic_parked(
        BOOKINGS, "h-1", message_type=hostile_type, error_type="KeyError", reason=HOSTILE
    )
    outage.park(BOOKINGS, [parked])
    tab.open(console, route="#/failed")

    tab.row("#groups", hostile_type).get_by_role("button", name="Discard…").click()
    expect(tab.page.locator("#discard-text")).to_contain_text(f"of type {hostile_type}")
    tab.page.locator("#discard-reason").fill(HOSTILE)
    tab.page.locator("#discard-ok").click()

    expect(tab.page.locator("#notice-text")).to_contain_text(f"of type {hostile_type}")
    entry = journal_rows(tab)[0]
    assert entry[2] == "discard"
    assert hostile_type in entry[4]
    assert entry[6] == HOSTILE
    assert tab.page.locator("main img, main script, #notice img").count() == 0
    assert tab.script_ran() is None
    assert tab.dialogs == []


EVIL_PAGE = "http://evil.example/"


def test_a_forged_action_from_another_site_changes_nothing(
    tab: Tab, console: RunningConsole, outage: DeskStorage
) -> None:
    """A page elsewhere posts a replay to the console as a form would (no preflight), while
    the operator's console is open in the same browser: it has neither the token nor the
    CSRF value, and nothing is replayed."""
    outage.park(BOOKINGS, [slow_desk(i) for i in range(2)])
    tab.open(console, route="#/failed")
    expect(tab.page.locator("#groups tbody tr")).to_have_count(1)
    body = json.dumps({"endpoint": BOOKINGS, "type": "Book", "error_type": "TimeoutError"})
    name, value = body[:-1] + ', "x": "', '"}'
    form = (
        f'<form method="POST" action="{console.base}/api/replay" enctype="text/plain">'
        f"<input name='{name}' value='{value}'></form>"
        "<script>document.forms[0].submit()</script>"
    )

    def serve_evil(route: Route) -> None:
        route.fulfill(status=200, content_type="text/html", body=form)

    evil = tab.page.context.new_page()
    evil.route(EVIL_PAGE, serve_evil)
    with evil.expect_navigation(url=f"{console.base}/api/replay"):
        evil.goto(EVIL_PAGE)
    refused = evil.locator("body").inner_text()

    assert "401" in refused or "token" in refused
    assert outage.depth(poison_queue(BOOKINGS)) == 2
    assert outage.depth(BOOKINGS) == 0
