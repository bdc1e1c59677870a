"""``bus console --system`` in a real headless Chromium: the page's app selector lists the
system's apps, and choosing one shows that app's endpoints and parked messages, asked of
the server for that app."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from lab.local.azurite import AzuriteEndpoints
from tests.console.browser.tab import Tab
from tests.console.parking import park, parked_content
from tests.console.running import RunningConsole
from tests.console.test_console_system import (  # noqa: F401 (the module's fixtures)
    emptied,
    messaging,
    off_the_loop,
    orders_state,
    system,
)

pytestmark = pytest.mark.azurite


def test_the_selector_switches_the_page_to_the_chosen_app(
    tab: Tab,
    emptied: RunningConsole,  # noqa: F811
    messaging: AzuriteEndpoints,  # noqa: F811
) -> None:
    parked = [parked_content(i, "shipping") for i in range(2)]
    off_the_loop(lambda: park(messaging, parked, endpoint="shipping"))
    tab.open(emptied)
    table = tab.page.locator("#endpoint-table")
    select = tab.page.locator("#app-select")
    expect(select).to_be_visible()
    expect(select.locator("option")).to_have_text(["orders", "shipping"])
    expect(select).to_have_value("orders")
    expect(table.locator("tbody tr")).to_have_count(3)  # orders, loyalty, storefront
    expect(table.locator('tr[data-endpoint="orders"]')).to_be_visible()
    expect(table.locator('tr[data-endpoint="shipping"]')).to_have_count(0)

    select.select_option("shipping")

    expect(tab.page.locator("#app-name")).to_contain_text("shipping")
    expect(table.locator("tbody tr")).to_have_count(1)
    shipping = table.locator('tr[data-endpoint="shipping"]')
    expect(shipping.locator('[data-figure="poison_count"]')).to_have_text("2")

    tab.go("#/failed")  # the failed messages of the app chosen, not of the first
    view = tab.page.locator("main")
    expect(view.get_by_text("shipping", exact=True).first).to_be_visible()
    expect(view.get_by_text("orders", exact=True)).to_have_count(0)
