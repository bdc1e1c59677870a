"""The browser tests' fixtures: one Chromium per module (Debian's, driven by Playwright), a
fresh browser context per test (its own sessionStorage), and the desk app provisioned in the
module's private emulator (``emulator``, tests/console/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, ViewportSize, expect, sync_playwright

from lab.chromium import CHROMIUM_FLAGS
from lab.local.azurite import AzuriteEndpoints
from tests.chromium import required_chromium
from tests.console.browser.desk import DeskStorage
from tests.console.browser.tab import Tab

VIEWPORT: ViewportSize = {"width": 1400, "height": 900}
WAIT_MS = 30_000
"""Longest a step waits for the page: a deep poison queue is read in one pass per view."""


expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = required_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary, args=list(CHROMIUM_FLAGS))
        yield launched
        launched.close()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    """A new page in a context of its own; the test fails if a script error escaped."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    opened = Tab(page)

    def dismiss(dialog: Dialog) -> None:
        opened.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.on("pageerror", lambda error: opened.errors.append(str(error)))
    yield opened
    context.close()
    assert opened.errors == []


@pytest.fixture(scope="module")
def desk(emulator: AzuriteEndpoints) -> DeskStorage:
    storage = DeskStorage(emulator.connection_string)
    storage.provision()
    return storage
