"""A page of the console in the browser, and ``bus console`` started on the desk app."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Locator, Page

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from tests.console.browser.desk_app import APP
from tests.console.running import RunningConsole, console_environ, running_console

HOSTILE = (
    "<script>window.__pwned = 'script'</script><img src=x onerror=\"window.__pwned = 'img'\">'\""
)
"""Markup a sender may write anywhere: it must show as these characters, and run nowhere."""
OPERATOR = "ops-ada"
"""Who acts in the consoles these tests start (``bus console --by``)."""


@dataclass
class Tab:
    """One page of the console, with what it did that no page of it should do."""

    page: Page
    dialogs: list[str] = field(default_factory=list)
    """Messages of alert, confirm and prompt dialogs (the page itself opens none)."""
    errors: list[str] = field(default_factory=list)
    """Uncaught script errors."""

    def open(self, console: RunningConsole, *, token: str | None = "", route: str = "") -> None:
        """The console's address as ``bus console`` printed it (``token`` None: none; a
        string: that one instead), at the view ``route`` names (``#/failed``)."""
        given = console.token if token == "" else token
        query = "" if given is None else f"?token={given}"
        self.page.goto(f"{console.base}/{query}{route}")

    def go(self, route: str) -> None:
        """The view ``route`` names, as a link to it goes there."""
        self.page.evaluate("route => { location.hash = route; }", route)

    def script_ran(self) -> object:
        """What a hostile value's script would have set, had it run (None: nothing)."""
        return self.page.evaluate("() => window.__pwned ?? null")

    def row(self, table: str, *cells: str) -> Locator:
        """The one row of ``table`` (a selector) holding every one of ``cells``' texts."""
        rows = self.page.locator(f"{table} tbody tr")
        for cell in cells:
            rows = rows.filter(has=self.page.get_by_text(cell, exact=True))
        return rows


def shown_range(first: int, last: int, total: int) -> str:
    """A pager's position as the page writes it (an en dash between the bounds)."""
    return f"{first}\N{EN DASH}{last} of {total}"


def text_of(locator: Locator) -> str:
    """A locator's visible text, its white space collapsed."""
    return re.sub(r"\s+", " ", locator.inner_text()).strip()


def desk_console(
    folder: Path, emulator: AzuriteEndpoints, *args: str
) -> AbstractContextManager[RunningConsole]:
    """``bus console --port 0 --by OPERATOR ARGS`` on the desk app in ``emulator``."""
    environ = console_environ(emulator.connection_string, **{APP_SETTING: APP})
    return running_console(folder, environ, "--by", OPERATOR, *args)
