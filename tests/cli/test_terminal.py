"""The operator tools' terminal output (shared/terminal.py, on rich)."""

from __future__ import annotations

import io

from shared.terminal import ProgressBar, StageLog, table


def test_a_table_shows_cells_as_text_never_as_markup_or_control_characters() -> None:
    text = table(
        ("name", "count"),
        [("[bold]a[/bold]", 7), ("b\x1b[2J\u202e", None)],
        right=("count",),
    )
    assert text.splitlines() == [
        "name             count",
        "──────────────────────",
        "[bold]a[/bold]       7",
        "b\\x1b[2J\\u202e       -",
    ]


def test_a_progress_bar_is_drawn_only_when_forced_or_on_a_terminal() -> None:
    for enabled, drawn in ((None, False), (False, False), (True, True)):
        stream = io.StringIO()  # not a terminal
        with ProgressBar("replay orders", 3, enabled=enabled, stream=stream) as bar:
            bar.advance(3, note="done")
        assert ("replay orders" in stream.getvalue()) is drawn
        assert ("3/3" in stream.getvalue()) is drawn


def test_a_stage_log_prints_one_timed_line_per_step_unless_quiet() -> None:
    stream = io.StringIO()
    StageLog(stream)("reading [table] orders")
    StageLog(stream, enabled=False)("not shown")
    [line] = stream.getvalue().splitlines()
    assert line.split()[1:] == ["reading", "[table]", "orders"]
    assert line.split()[0].endswith("s")
