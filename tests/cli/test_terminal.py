"""The operator tools' terminal output (shared/terminal.py, on rich)."""

from __future__ import annotations

import io

from shared.terminal import Counters, ProgressBar, StageLog, table


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


def test_counters_print_one_line_per_finished_job_off_a_terminal() -> None:
    stream = io.StringIO()  # not a terminal
    with Counters("rows", stream=stream) as counters:
        for page in range(1, 4):
            counters.update("audit/orders", page * 10, note=f"{page} pages", done=page == 3)
        counters.update("audit/gone", 0, note="table does not exist", done=True)
    lines = [line.split(maxsplit=1)[1] for line in stream.getvalue().splitlines()]
    assert lines == ["audit/orders: 30 rows (3 pages)", "audit/gone: 0 rows (table does not exist)"]

    quiet = io.StringIO()
    with Counters("rows", enabled=False, stream=quiet) as counters:
        counters.update("audit/orders", 10, done=True)
    assert quiet.getvalue() == ""

    live = io.StringIO()
    with Counters("rows", enabled=True, stream=live) as counters:
        counters.update("audit/orders", 10, note="1 pages")
    assert "audit/orders" in live.getvalue()
    assert "10 rows" in live.getvalue()
