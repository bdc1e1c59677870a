"""One way to put a value from outside into a log line, an error text or a stored reason.

A value a sender chose (a JSON key, a message type, a partition key, a path, an error text
that quotes them) must not be able to start a line of its own, draw on a terminal or fill a
log: ``shown`` escapes every control character (newlines, carriage returns, escape sequences,
the Unicode line and paragraph separators, lone surrogates) as a backslash sequence and bounds
the length, saying how much was cut. What it returns is one printable line; what is already
printable (ASCII or not) stays as it is, so ordinary names read as before.
"""

from __future__ import annotations

LIMIT = 300
"""Characters of an outside value kept in one log line; the rest is counted, not shown."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


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
    was left out. A backslash is doubled, so an escape in the output cannot be forged by the
    input."""
    text = value if isinstance(value, str) else str(value)
    head = text[:limit]
    out = "".join(_escaped(c) if not c.isprintable() or c == "\\" else c for c in head)
    if len(text) > limit:
        out += f"...({len(text) - limit} more characters)"
    return out
