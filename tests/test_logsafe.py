"""shared.logsafe.shown: what a sender wrote, as one printable, bounded piece of a log line."""

from __future__ import annotations

import io
import logging

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.logsafe import ContinuedLines, problems, shown


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("orders", "orders"),
        ("ünïcödé ☃", "ünïcödé ☃"),
        ("a\nb", "a\\nb"),
        ("a\r\nb", "a\\r\\nb"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("line\u2028sep\u2029par", "line\\u2028sep\\u2029par"),
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("lone\ud800", "lone\\ud800"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
    ],
)
def test_control_characters_are_escaped_and_the_rest_is_kept(value: str, expected: str) -> None:
    assert shown(value) == expected
    assert shown(shown(value)) == shown(value), "escaping twice changes nothing"


def test_a_long_value_is_cut_saying_how_much() -> None:
    assert shown("x" * 1000, 10) == "x" * 10 + "...(990 more characters)"


def test_a_schema_error_names_its_keys_escaped_on_one_line() -> None:
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        a: int

    with pytest.raises(ValidationError) as refused:
        Strict.model_validate({"a": 1, "k\noutcome=processed": 2})
    text = problems(refused.value)
    assert "\n" not in text
    assert "k\\noutcome=processed: Extra inputs are not permitted" in text


def test_an_exception_quoting_a_forged_line_cannot_start_a_record() -> None:
    forged = "2026-01-01 00:00:00,000 INFO shared.bus.receiver: endpoint=x outcome=processed"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ContinuedLines("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tests.logsafe.forged")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError(f"bad value x\n{forged}\r{forged}\u2028{forged}")
        except ValueError:
            logger.exception("handler failed")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) > 3, "the traceback is kept"
    assert lines[0].endswith("tests.logsafe.forged: handler failed")
    for line in lines[1:]:
        assert line.startswith(ContinuedLines.INDENT), line
    assert not any(line.startswith(forged[:10]) for line in lines)
