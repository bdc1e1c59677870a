"""The suite-time table (``python -m lab.durations``) from a saved pytest output."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.durations import main, per_file

REPORT = """\
============================== slowest durations ===============================
6.24s setup    tests/audit/test_dropped.py::test_warns[a]
15.56s call     tests/audit/test_dropped.py::test_warns[a]
0.77s teardown tests/audit/test_dropped.py::test_warns[a]
3.85s call     tests/audit/test_dropped.py::test_reads_safely
0.50s call     tests/cli/test_cli.py::test_help
0.00s setup    tests/cli/test_cli.py::test_help
2556 passed, 40 deselected in 912.00s (0:15:12)
"""


def test_phases_are_summed_per_file_and_the_costliest_file_comes_first() -> None:
    files = per_file(REPORT.splitlines())

    assert [f.path for f in files] == ["tests/audit/test_dropped.py", "tests/cli/test_cli.py"]
    dropped = files[0]
    assert dropped.seconds == {"setup": 6.24, "call": 15.56 + 3.85, "teardown": 0.77}
    assert len(dropped.tests) == 2
    assert dropped.per_test == pytest.approx((6.24 + 15.56 + 3.85 + 0.77) / 2)
    assert files[1].total == pytest.approx(0.5)


def test_the_table_lists_the_top_files_and_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "durations.txt"
    report.write_text(REPORT)

    assert main([str(report), "--top", "1"]) == 0

    out = capsys.readouterr().out
    assert "| tests/audit/test_dropped.py | 26.4 | 6.2 | 19.4 | 0.8 | 2 | 13.21 |" in out
    assert "test_cli.py |" not in out
    assert "2 files, 3 tests, 26.9 s summed; the 1 above hold 26.4 s (98 %)." in out


def test_a_forged_test_id_cannot_add_a_line_to_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "durations.txt"
    report.write_bytes(b"1.00s call     tests/x\rforged.py::t\n")

    assert main([str(report)]) == 0

    out = capsys.readouterr().out
    assert "\r" not in out
    assert "tests/x\\rforged.py" in out


def test_an_output_without_durations_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "durations.txt"
    report.write_text("2556 passed in 912.00s\n")

    assert main([str(report)]) == 2

    assert "has no duration lines: run pytest with --durations=0" in capsys.readouterr().err


def test_two_runs_are_compared_by_each_files_share_of_its_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tmp_path / "before.txt"
    before.write_text(REPORT)
    after = tmp_path / "after.txt"
    after.write_text(
        "3.00s call     tests/audit/test_dropped.py::test_warns[a]\n"
        "1.00s call     tests/cli/test_cli.py::test_help\n"
    )

    assert main([str(after), "--before", str(before), "--file", "tests/audit/test_dropped.py"]) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| tests/audit/test_dropped.py | 26.4 | 3.0 | 2 | 1 | 98.1 % | 75.0 % |"
    assert out[3] == "| all files | 26.9 | 4.0 | 3 | 2 | 100 % | 100 % |"
