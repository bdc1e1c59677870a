"""Deterministic identifiers.

Outgoing message ids derive from the incoming id and the output's position, so that any
re-run of a handler for the same message names its outputs the same way (ConsistentOutput).
Only attempt ids and claim ids are random: they must differ on every try.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator

_NAMESPACE = uuid.UUID("6f1c1a52-27a4-4a8e-9d36-0b7e4c2f9a10")


def derived_id(parent: str, *parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, ":".join([parent, *map(str, parts)])))


def fresh_id() -> str:
    return str(uuid.uuid4())


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from SHA-256; Python's hash() is salted per process and would differ."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


_SLICE_CHARS = 1024 * 1024


def json_sha256(value: object, encoder: json.JSONEncoder) -> str:
    """SHA-256 (hex) of ``encoder.encode(value)`` as UTF-8, the text encoded a 1 MiB slice at
    a time: encoding it whole would be one more copy of a large body. The text itself is made
    in one go, by the C encoder (piece by piece is slow for a body of many small values)."""
    digest = hashlib.sha256()
    for piece in _utf8_slices(encoder.encode(value)):
        digest.update(piece)
    return digest.hexdigest()


def bounded_json_sha256(value: object, encoder: json.JSONEncoder, max_bytes: int) -> str | None:
    """``json_sha256``, or None when the UTF-8 text is over ``max_bytes``: for what comes
    from outside, which the caller refuses above a limit. A text of more characters than
    ``max_bytes`` is refused before any of it is hashed (a character is at least one byte)."""
    text = encoder.encode(value)
    if len(text) > max_bytes:
        return None
    digest = hashlib.sha256()
    size = 0
    for piece in _utf8_slices(text):
        size += len(piece)
        if size > max_bytes:
            return None
        digest.update(piece)
    return digest.hexdigest()


def _utf8_slices(text: str) -> Iterator[bytes]:
    """``text`` as UTF-8, 1 MiB of characters at a time."""
    for start in range(0, len(text), _SLICE_CHARS):
        yield text[start : start + _SLICE_CHARS].encode("utf-8")
