"""The test kit's bench (``lab.bench.kit_flow``) at a tiny size: every message crosses the
three endpoints once, and the figures it prints name what they measured. Behaviour only,
never timings."""

from __future__ import annotations

import pytest

from lab.bench.kit_flow import flow_app, main, one_run


async def test_each_message_is_delivered_once_to_each_endpoint() -> None:
    _, _, deliveries, operations = await one_run(flow_app(), 10)
    assert deliveries == 30
    assert operations > 30


def test_the_bench_prints_its_figures_and_the_load(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--messages", "5", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "5 messages through 3 endpoints, best of 1" in out
    assert "(15 deliveries," in out
    assert "load average" in out
