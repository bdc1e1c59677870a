"""One way to put a value from outside into a log line, an error text or a stored reason.

A value a sender chose (a JSON key, a message type, a partition key, a path, an error text
that quotes them) must not be able to start a line of its own, draw on a terminal or fill a
log: ``shown`` escapes every control character (newlines, carriage returns, escape sequences,
the Unicode line and paragraph separators, lone surrogates) as a backslash sequence and bounds
the length, saying how much was cut. What it returns is one printable line; what is already
printable (ASCII or not) stays as it is, so ordinary names read as before.

A backslash is left as it is, so ``shown`` may be applied twice (where an error text built
from escaped values reaches a log line that escapes it again) without doubling anything: the
guarantee is that no control character gets through, not that the escaping can be undone.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

LIMIT = 300
"""Characters of an outside value kept in one log line; the rest is counted, not shown."""
REASON_CHARS = 4000
"""Characters of an error text kept in a poison reason, escaped to one line: the text quotes
what the sender wrote (key names, types), so it is as hostile as the message."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(value: object, limit: int = LIMIT) -> str:
    """``value`` (``str()`` of it when not a string) as one printable line of at most about
    ``limit`` characters: control characters escaped, the rest cut with the count of what
    was left out."""
    text = value if isinstance(value, str) else str(value)
    head = text[:limit]
    # Nearly every value is printable whole: one check in C instead of one per character.
    out = (
        head if head.isprintable() else "".join(c if c.isprintable() else _escaped(c) for c in head)
    )
    if len(text) > limit:
        out += f"...({len(text) - limit} more characters)"
    return out


def problems(error: ValidationError, what: str = "value", most: int = 10) -> str:
    """A pydantic validation error as one line: each problem's location (the key names a
    sender chose) and message, escaped, at most ``most`` of them. ``str(error)`` would put
    the key names in raw, one problem a line."""
    listed = error.errors()
    text = "; ".join(
        f"{shown('.'.join(map(str, e['loc'])) or what, 100)}: {shown(e['msg'], 200)}"
        for e in listed[:most]
    )
    if len(listed) > most:
        text += f"; and {len(listed) - most} more"
    return text


class ContinuedLines(logging.Formatter):
    """A formatter under which every line of a record after its first (a traceback, an
    exception's own text) is indented, and a carriage return or Unicode line separator is
    escaped: a line that starts at the margin is always the start of a real record, whatever
    an exception raised by a handler quoted."""

    INDENT = "    | "

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for separator in ("\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"):
            text = text.replace(separator, _escaped(separator))
        return text.replace("\n", "\n" + self.INDENT)
