"""The overview in a real headless Chromium shows each saga's instances, the timeouts they
wait for (an overdue one highlighted), its ``saga_not_found`` messages and unreadable rows;
an instance is looked up by its correlation value from the overview, at an address of its
own, with its status and pending timeouts; markup in a correlation value, a timeout's type
and a message id shows as text and runs nothing; a value that is no partition key shows the
server's refusal and no data. On the saga app (``tests/console/sagas.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.console.browser.desk import blocking
from tests.console.browser.tab import Tab
from tests.console.running import RunningConsole, console_environ, running_console
from tests.console.saga_app import APP, CHECKOUT, LEDGER
from tests.console.sagas import MARKUP, WAITING, leave_instances

pytestmark = pytest.mark.azurite


@pytest.fixture(scope="module")
def console(
    emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    async def leave() -> None:
        async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
            await leave_instances(account)

    blocking(leave)
    environ = console_environ(emulator.connection_string, **{APP_SETTING: APP})
    with running_console(tmp_path_factory.mktemp("sagas"), environ, "--by", "ada") as running:
        yield running


def look_up(tab: Tab, value: str) -> None:
    """Look ``value`` up with the form on the page (the overview's, or the saga view's)."""
    form = tab.page.locator("#saga-lookup")
    form.locator("select[name=endpoint]").select_option(CHECKOUT)
    form.locator("input[name=instance]").fill(value)
    form.get_by_role("button", name="Look up").click()


def test_the_overview_shows_each_sagas_instances(tab: Tab, console: RunningConsole) -> None:
    tab.open(console)

    row = tab.page.locator(f'#sagas-table tr[data-saga="{CHECKOUT}"]')
    expect(row.locator('[data-figure="saga_live"]')).to_have_text("3")
    expect(row.locator('[data-figure="saga_completed"]')).to_have_text("1")
    expect(row.locator('[data-figure="saga_timeouts_pending"]')).to_have_text("4")
    expect(row.locator('[data-figure="saga_not_found"]')).to_have_text("2")
    unreadable = row.locator('[data-figure="saga_unreadable"]')
    expect(unreadable).to_have_text("1")
    expect(unreadable).to_have_class("num warn")
    expect(row.locator('[data-figure="saga_next_timeout_due"]')).to_have_class("warn")
    expect(row.locator('[data-figure="saga_scanned"]')).to_have_text("5 instances, 5 audit rows")
    # ledger is no saga: no row; the endpoints' table is unchanged.
    expect(tab.page.locator(f'#sagas-table tr[data-saga="{LEDGER}"]')).to_have_count(0)
    expect(tab.page.locator(f'#endpoint-table tr[data-endpoint="{LEDGER}"]')).to_be_visible()
    expect(tab.page.locator("#sagas-partial")).to_have_count(0)


def test_an_instance_is_looked_up_from_the_overview(tab: Tab, console: RunningConsole) -> None:
    tab.open(console)

    look_up(tab, WAITING)

    expect(tab.page.locator("#saga-status")).to_have_text("live")
    assert "#/saga?" in tab.page.url
    timeouts = tab.page.locator("#saga-timeouts tbody tr")
    expect(timeouts).to_have_count(2)
    expect(timeouts.nth(0)).to_contain_text("PaymentDue")
    expect(timeouts.nth(1)).to_contain_text(MARKUP)
    expect(tab.page.locator("#saga-started-by")).to_have_text(MARKUP)
    expect(tab.page.locator("#saga img")).to_have_count(0)

    look_up(tab, "done-1")
    expect(tab.page.locator("#saga-status")).to_have_text("completed")
    expect(tab.page.locator("#saga-timeouts")).to_contain_text("No timeout pending.")

    look_up(tab, "never-1")
    expect(tab.page.locator("#saga-status")).to_have_attribute("data-status", "none")

    look_up(tab, "damaged-1")
    expect(tab.page.locator("#saga-status")).to_have_attribute("data-status", "unreadable")
    expect(tab.page.locator("#saga-unreadable")).to_contain_text("not a saga instance")


def test_markup_as_a_correlation_value_is_text(tab: Tab, console: RunningConsole) -> None:
    tab.open(console)

    look_up(tab, MARKUP)

    expect(tab.page.locator("#saga-correlation")).to_have_text(MARKUP)
    expect(tab.page.locator("#saga-status")).to_have_text("live")
    expect(tab.page.locator("img")).to_have_count(0)
    assert tab.script_ran() is None
    assert tab.dialogs == []


def test_a_value_that_is_no_partition_key_shows_the_refusal(
    tab: Tab, console: RunningConsole
) -> None:
    tab.open(console)

    look_up(tab, "orders/1#x")

    banner = tab.page.locator("#banner-text")
    expect(banner).to_contain_text("400: a correlation value is a partition key")
    expect(tab.page.locator("#saga")).to_have_count(0)
