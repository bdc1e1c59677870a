"""500 parked messages paged through in a real headless Chromium: every one listed on exactly
one page, none taken, and the groups counting all of them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from lab.local.azurite import AzuriteEndpoints
from shared.resources import poison_queue
from tests.console.browser.desk import DeskStorage, synthetic_parked
from tests.console.browser.desk_app import BOOKINGS
from tests.console.browser.tab import Tab, desk_console, shown_range, text_of
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite

PARKED = 500
ERRORS = ("KeyError", "TimeoutError", "ValueError", "RuntimeError", "OSError")


@pytest.fixture(scope="module")
def console(
    desk: DeskStorage, emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    desk.clear()
    desk.park(
        BOOKINGS,
        [
            synthetic_parked(
                BOOKINGS,
                f"m-{i:03d}",
                message_type="Book",
                error_type=ERRORS[i % len(ERRORS)],
                reason=f"failure {i}",
            )
            for i in range(PARKED)
        ],
    )
    with desk_console(tmp_path_factory.mktemp("desk"), emulator) as running:
        yield running


def test_paging_through_500_parked_messages_lists_each_once(
    tab: Tab, console: RunningConsole, desk: DeskStorage
) -> None:
    started = time.monotonic()
    tab.open(console, route=f"#/parked?endpoint={BOOKINGS}")
    expect(tab.page.locator("#failed-list tbody tr")).to_have_count(50)
    tab.page.locator("#filters select[name=size]").select_option("200")
    tab.page.get_by_role("button", name="Filter").click()

    seen: Counter[str] = Counter()
    positions = []
    while True:
        position = tab.page.locator("#failed-list .pager .position").first
        expect(position).to_have_text(
            shown_range(len(seen) + 1, min(len(seen) + 200, PARKED), PARKED)
        )
        positions.append(text_of(position))
        ids = tab.page.locator("#failed-list tbody tr a.id").all_inner_texts()
        seen.update(ids)
        following = tab.page.locator("#failed-list .pager a[rel=next]").first
        if following.count() == 0:
            break
        following.click()

    assert positions == [
        shown_range(1, 200, PARKED),
        shown_range(201, 400, PARKED),
        shown_range(401, 500, PARKED),
    ]
    assert seen == Counter({f"m-{i:03d}": 1 for i in range(PARKED)})
    tab.page.locator("#failed-list .pager a[rel=prev]").first.click()
    expect(tab.page.locator("#failed-list .pager .position").first).to_have_text(
        shown_range(201, 400, PARKED)
    )
    assert desk.depth(poison_queue(BOOKINGS)) == PARKED  # looked at, none taken
    print(f"paged through {PARKED} parked messages in {time.monotonic() - started:.1f}s")


def test_the_groups_count_all_500(tab: Tab, console: RunningConsole) -> None:
    tab.open(console, route="#/failed")

    groups = tab.page.locator("#groups tbody tr")
    expect(groups).to_have_count(len(ERRORS))
    expect(tab.page.locator("#groups h2")).to_contain_text(f"({PARKED})")
    counts = [text_of(groups.nth(i).locator("td").nth(3)) for i in range(len(ERRORS))]
    assert counts == [str(PARKED // len(ERRORS))] * len(ERRORS)
