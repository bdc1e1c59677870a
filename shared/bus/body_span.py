"""Where the ``body`` of an envelope lies in its bytes, found chunk by chunk.

A parked message's whole body is handed out as a stream (``shared.bus.parked_body``): its
token is read in chunks, never whole, so the body's value cannot be had from parsing the
envelope. This scanner follows the JSON's strings and nesting across chunks and notes where
the value of the top-level key ``body`` starts and ends; the envelope's other fields (its
bytes outside that span) are small and are parsed as usual. It only locates: the bytes were
checked against the token's digest first, and the envelope they make is validated.
"""

from __future__ import annotations

import re

_IN_STRING = re.compile(rb'[\\"]')
_STRUCTURE = re.compile(rb'["{}\[\],:]')
_BLANK = b" \t\r\n"
_KEY = b"body"


class BodySpan:
    """Feed an envelope's bytes in order (``feed``); then ``start`` and ``end`` are the
    offsets of the top-level ``body`` value (None when there is none), and ``twice`` says
    the key appeared more than once (parsers disagree which one counts: refused)."""

    def __init__(self) -> None:
        self.start: int | None = None
        self.end: int | None = None
        self.twice = False
        self.opens: int | None = None
        """The value's first byte (``{`` for an object)."""
        self._offset = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._expect_key = False
        self._key: bytearray | None = None
        """The top-level key being read (its first bytes only: a key is compared to ``body``)."""
        self._last_key = b""
        self._await_value = False

    def feed(self, chunk: bytes) -> None:
        at = 0
        while at < len(chunk):
            at = self._step(chunk, at)
        self._offset += len(chunk)

    def _step(self, chunk: bytes, at: int) -> int:
        """Read ``chunk`` from ``at`` to the next thing that matters; returns where to go on."""
        if self._escaped:
            self._escaped = False
            self._keep(chunk[at : at + 1])
            return at + 1
        if self._in_string:
            return self._string(chunk, at)
        if self._await_value:
            if chunk[at] in _BLANK:
                return at + 1
            self.start, self._await_value = self._offset + at, False
            self.opens = chunk[at]
        found = _STRUCTURE.search(chunk, at)
        if found is None:
            return len(chunk)
        self._structure(chunk[found.start()], self._offset + found.start())
        return found.start() + 1

    def _string(self, chunk: bytes, at: int) -> int:
        found = _IN_STRING.search(chunk, at)
        stop = len(chunk) if found is None else found.start()
        self._keep(chunk[at:stop])
        if found is None:
            return stop
        if chunk[stop] == ord("\\"):
            self._escaped = True
            self._keep(b"\\")
            return stop + 1
        self._in_string = False
        if self._key is not None:
            self._last_key, self._key = bytes(self._key), None
        return stop + 1

    def _keep(self, part: bytes) -> None:
        if self._key is not None and len(self._key) <= len(_KEY):
            self._key += part[: len(_KEY) + 1]

    def _structure(self, char: int, position: int) -> None:
        if char == ord('"'):
            self._in_string = True
            if self._depth == 1 and self._expect_key:
                self._key, self._expect_key = bytearray(), False
        elif char in b"{[":
            self._depth += 1
            self._expect_key = self._depth == 1 and char == ord("{")
        elif char in b"}]":
            if self._depth == 1:
                self._value_ends(position)
            self._depth -= 1
        elif char == ord(",") and self._depth == 1:
            self._value_ends(position)
            self._expect_key = True
        elif char == ord(":") and self._depth == 1 and self._last_key == _KEY:
            self.twice = self.twice or self.start is not None
            self._await_value = self.start is None

    def _value_ends(self, position: int) -> None:
        if self.start is not None and self.end is None:
            self.end = position
