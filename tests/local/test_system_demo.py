"""The system demo at a small size (``python -m lab.local.demo`` without ``--single``): the
sample system's three apps in three host processes over one messaging emulator, each app's
rows in its own store, with duplicates, crashes and a SIGKILL in every host, ``payments``'
host down and ``shipping``'s state emulator frozen mid-run. It passes only when nothing is
lost or doubled in any app, every cross-app message is processed once by its destination's
app, and the three cleanups, run at once, leave nothing and report no ``bad_origin``."""

from __future__ import annotations

import pytest

from lab.local import demo

pytestmark = pytest.mark.slow


def test_a_small_system_demo_passes_with_one_host_down_and_one_state_account_frozen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert demo.main(["--orders", "12", "--down-seconds", "4"]) == 0
    printed = capsys.readouterr().out
    assert "payments: host killed with SIGKILL, down for 4s" in printed
    assert "shipping: state storage stopped (SIGSTOP) for 4s" in printed
    last = printed.strip().splitlines()[-1]
    assert last.startswith("demo: apps=3 ")
    assert last.endswith("verdict=PASS")
    assert " lost=0 doubled=0 ghosts=0 residue=0 " in last
