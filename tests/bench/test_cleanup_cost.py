"""The cleanup-cost measurement (``lab.bench.cleanup_cost``) on the in-memory stores."""

from __future__ import annotations

import pytest

from lab.bench.cleanup_cost import main, measure


async def test_token_mode_s_cleanup_deletes_each_processed_token_in_batches() -> None:
    """Given 10 roots drained in token mode (20 handled messages), when one cleanup pass runs
    a grace period later, then it deletes the 20 processed tokens in one batch request per
    endpoint, reads none of them first, and retires every outbox record."""
    result = await measure("token", 10)

    assert result["handled"] == 20
    assert result["removed"] == {"incoming_tokens": 20, "outbox_records": 20}
    assert result["tokens_left"] == 0
    by_kind = result["by_kind"]
    assert isinstance(by_kind, dict)
    assert by_kind["blob.delete_batch"] == 2
    assert "blob.get_properties" not in by_kind
    assert "blob.delete" not in by_kind


def test_the_command_prints_one_line_per_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--roots", "3", "--modes", "token", "processed_messages"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert [line.split('"mode": "')[1].split('"')[0] for line in lines] == [
        "token",
        "processed_messages",
    ]
