"""Debian's Chromium, as the tests and the lab drive it: found on the PATH (``make chromium``
installs it), never downloaded, started headless and quiet (nothing phones out)."""

from __future__ import annotations

import shutil

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Headless, as root in a container (no sandbox), and no traffic of the browser's own."""


def chromium() -> str | None:
    """The browser's path, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")
