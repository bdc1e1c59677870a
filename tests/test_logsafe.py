"""shared.logsafe.shown: what a sender wrote, as one printable, bounded piece of a log line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.logsafe import problems, shown


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
