"""Chromium for the tests that render pages (the audit report, the console): required under
CI, skipped elsewhere when it is missing (``lab.chromium`` finds it)."""

from __future__ import annotations

import pytest

from lab.chromium import chromium
from tests.conftest import UNDER_CI


def required_chromium() -> str:
    """The browser's path; a test without it fails under CI and is skipped elsewhere."""
    found = chromium()
    if found is None:
        if UNDER_CI:
            pytest.fail("chromium is required under CI (make deps installs it)")
        pytest.skip("chromium not installed (make deps)")
    return found
