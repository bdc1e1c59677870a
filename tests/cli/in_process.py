"""``bus`` run inside the test's process, as the tests that need its output and exit code
call it (a subprocess where the process itself is under test: tests/cli/test_cli_account.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shared.cli import main

Run = Callable[..., tuple[int, str, str]]
"""``bus ARGS`` -> (exit code, stdout, stderr)."""


def in_process(capsys: pytest.CaptureFixture[str], *leading: str) -> Run:
    """``bus LEADING ARGS`` called in this process, its output taken from ``capsys``."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*leading, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
