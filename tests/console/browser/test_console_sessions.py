"""The overview in a real headless Chromium shows transactional sessions waiting to be
signalled as a warning, with each session endpoint's sessions by state; a look stopped at its
scan limit writes its counts as lower bounds ("at least N"). On the session app: ``storefront``
with a request crashed after its commit, one finished, one failed inside its block and a
damaged row; ``kiosk`` with the same and 100 finished records more than the console's look
reads (BUS_CONSOLE_AUDIT_SCAN_ROWS=100)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.console.browser.desk import blocking
from tests.console.browser.tab import Tab, text_of
from tests.console.running import RunningConsole, console_environ, running_console
from tests.console.session_app import APP, KIOSK, ORDERS, STOREFRONT
from tests.console.sessions import leave_sessions, provisioned, write_finished

pytestmark = pytest.mark.azurite

SCAN_LIMIT = 100
"""The least BUS_CONSOLE_AUDIT_SCAN_ROWS takes."""


@pytest.fixture(scope="module")
def console(
    emulator: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningConsole]:
    async def leave() -> None:
        async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
            await provisioned(account)
            await leave_sessions(account, STOREFRONT)
            await leave_sessions(account, KIOSK)
            await write_finished(account, KIOSK, SCAN_LIMIT)

    blocking(leave)
    environ = console_environ(
        emulator.connection_string,
        **{APP_SETTING: APP, "BUS_CONSOLE_AUDIT_SCAN_ROWS": str(SCAN_LIMIT)},
    )
    with running_console(tmp_path_factory.mktemp("sessions"), environ, "--by", "ada") as running:
        yield running


def sessions_of(console: RunningConsole, name: str) -> dict[str, Any]:
    answer = console.get("/api/overview")
    assert answer.status == 200, answer.body
    [endpoint] = [e for e in answer.json()["endpoints"] if e["name"] == name]
    sessions: dict[str, Any] = endpoint["sessions"]
    return sessions


def test_sessions_waiting_to_be_signalled_show_as_a_warning(
    tab: Tab, console: RunningConsole
) -> None:
    tab.open(console)

    warning = tab.page.locator("#sessions-waiting")
    expect(warning).to_be_visible()
    # kiosk's look stopped early, so the total is a lower bound.
    expect(warning).to_contain_text(
        f"At least 2 sessions committed and not signalled yet ({STOREFRONT}, {KIOSK})"
    )
    expect(warning).to_contain_text("1 min 0 s after the commit (BUS_SESSION_RESEND_SECONDS)")
    row = tab.page.locator(f'#sessions-table tr[data-sessions="{STOREFRONT}"]')
    waiting = row.locator('[data-figure="sessions_waiting"]')
    expect(waiting).to_have_text("1")
    expect(waiting).to_have_class("num warn")
    expect(row.locator('[data-figure="sessions_open"]')).to_have_text("1")
    expect(row.locator('[data-figure="sessions_finished"]')).to_have_text("1")
    unreadable = row.locator('[data-figure="sessions_unreadable"]')
    expect(unreadable).to_have_text("1")
    expect(unreadable).to_have_class("num warn")
    expect(row.locator('[data-figure="sessions_scanned"]')).to_have_text("4")
    assert text_of(row.locator('[data-figure="sessions_oldest_waiting"]')).endswith(" s")
    served = sessions_of(console, STOREFRONT)
    assert (served["waiting"], served["complete"]) == (1, True)
    # orders takes no sessions: no row; the endpoints' table is unchanged.
    expect(tab.page.locator(f'#sessions-table tr[data-sessions="{ORDERS}"]')).to_have_count(0)
    expect(tab.page.locator(f'#endpoint-table tr[data-endpoint="{ORDERS}"]')).to_be_visible()


def test_a_look_stopped_at_the_scan_limit_gives_lower_bounds(
    tab: Tab, console: RunningConsole
) -> None:
    tab.open(console)

    row = tab.page.locator(f'#sessions-table tr[data-sessions="{KIOSK}"]')
    # Key order: the damaged row's partition, finished, open, waiting, then the 100 written
    # after them, of which the look reads 96.
    expect(row.locator('[data-figure="sessions_waiting"]')).to_have_text("at least 1")
    expect(row.locator('[data-figure="sessions_open"]')).to_have_text("at least 1")
    expect(row.locator('[data-figure="sessions_finished"]')).to_have_text("at least 97")
    expect(row.locator('[data-figure="sessions_unreadable"]')).to_have_text("at least 1")
    expect(row.locator('[data-figure="sessions_scanned"]')).to_have_text(
        f"{SCAN_LIMIT}, more not read"
    )
    expect(tab.page.locator("#sessions-partial")).to_contain_text("lower bounds")
    served = sessions_of(console, KIOSK)
    assert (served["records_scanned"], served["complete"]) == (SCAN_LIMIT, False)
