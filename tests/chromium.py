"""Debian's Chromium for the tests that render pages (the audit report, the console): found
on the PATH (``make deps`` installs it), never downloaded; required under CI."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import UNDER_CI

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
"""Headless, as root in a container (no sandbox), and quiet: nothing phones out."""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def required_chromium() -> str:
    """The browser's path; a test without it fails under CI and is skipped elsewhere."""
    found = chromium()
    if found is None:
        if UNDER_CI:
            pytest.fail("chromium is required under CI (make deps installs it)")
        pytest.skip("chromium not installed (make deps)")
    return found
