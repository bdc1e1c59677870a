"""The deployed console's sign-in in a browser: the real function_app.py's console in a real
host process (``lab.host``), with its secret set. The page loads with no key (a browser asks
for its script and style without one) and asks for the secret; a wrong one is asked for
again; the right one is sent as a header on every API request, never in an address."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Request, expect

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from tests.console.browser.tab import Tab

pytestmark = pytest.mark.azurite

KEY = "sign-in-host-key"
SECRET = "the-console-secret-5e0c3b9a71d24f68"


@pytest.fixture(scope="module")
def console_url(
    emulator: AzuriteEndpoints, project: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The console function on the sample app ``project`` provisioned in ``emulator``."""
    process = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": emulator.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            "BUS_HOST_FUNCTION_KEY": KEY,
            "BUS_CONSOLE_ENABLED": "true",
            "BUS_CONSOLE_SECRET": SECRET,
        },
        tmp_path_factory.mktemp("sign-in") / "host.log",
        args=["--functions", "console"],
    )
    process.start()
    # The page by its file name: the local host matches paths without their trailing slash.
    yield f"{process.url}/api/console/index.html"
    assert process.stop() == 0


def sign_in(tab: Tab, secret: str) -> None:
    expect(tab.page.locator("#sign-in")).to_be_visible()
    tab.page.locator("#console-secret").fill(secret)
    tab.page.locator("#sign-in-ok").click()


def test_the_page_asks_for_the_secret_and_shows_no_data_without_it(
    tab: Tab, console_url: str
) -> None:
    tab.page.goto(f"{console_url}#/failed")

    expect(tab.page.locator("#sign-in")).to_be_visible()
    expect(tab.page.locator("#banner-text")).to_contain_text("401")
    assert tab.page.locator("main table").count() == 0
    expect(tab.page.locator("#who")).to_have_text("")


def test_a_wrong_secret_is_asked_for_again_and_the_right_one_signs_in(
    tab: Tab, console_url: str
) -> None:
    sent: list[dict[str, str]] = []

    def record(request: Request) -> None:
        if "/api/console/api/" in request.url:
            sent.append(request.headers)

    tab.page.on("request", record)
    tab.page.goto(f"{console_url}#/failed")

    sign_in(tab, SECRET[:-1] + "x")
    # Until the answer comes, the old form and the banner's old text stay (the banner hidden):
    # the banner shown again is the answer, and the form is redrawn in the same step.
    expect(tab.page.locator("#banner")).to_be_visible()
    expect(tab.page.locator("#banner-text")).to_contain_text("console secret")
    expect(tab.page.locator("#sign-in")).to_be_visible()
    assert tab.page.evaluate("() => sessionStorage.getItem('bus-console-secret')") is None
    sign_in(tab, SECRET)

    expect(tab.page.locator("#who")).to_have_text("signed in as console secret")
    expect(tab.page.locator("#groups")).to_be_visible()
    expect(tab.page.locator("#sign-in")).to_have_count(0)
    assert SECRET not in tab.page.url
    assert sent[-1]["x-console-secret"] == SECRET
    assert all("x-functions-key" not in headers for headers in sent)
    tab.page.reload()  # kept for the tab: no second sign-in
    expect(tab.page.locator("#who")).to_have_text("signed in as console secret")
