"""Azure Storage naming and size rules, enforced identically by every backend.

Azure rejects bad names server-side with a 400; we check first so that both backends fail the
same way with a message that says which rule was broken, before any I/O happens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from shared.errors import InvalidName, TooLarge

# Names from outside are matched whole (``fullmatch``): '$' would accept a trailing newline.
_CONTAINER_OR_QUEUE = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_TABLE = re.compile(r"[A-Za-z][A-Za-z0-9]{2,62}")
_KEY_FORBIDDEN = re.compile(r"[/\\#?\x00-\x1f\x7f-\x9f]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_BLOB_NAME = 1024
MAX_KEY_BYTES = 1024
MAX_METADATA_BYTES = 8 * 1024
MAX_PROPERTY_BYTES = 64 * 1024
MAX_ENTITY_BYTES = 1024 * 1024
MAX_CUSTOM_PROPERTIES = 252
MAX_QUEUE_MESSAGE_BYTES = 64 * 1024
MAX_TRANSACTION_OPERATIONS = 100
RESERVED_PROPERTIES = frozenset({"PartitionKey", "RowKey", "Timestamp", "etag"})


def check_container_name(name: str) -> str:
    """Blob containers: 3-63 lowercase letters, digits and single hyphens."""
    if not _CONTAINER_OR_QUEUE.fullmatch(name):
        raise InvalidName(
            f"invalid container name {name!r}: use 3-63 lowercase letters, digits and single "
            "hyphens, starting and ending with a letter or digit"
        )
    return name


def check_queue_name(name: str) -> str:
    """Queues follow the same rule as containers."""
    if not _CONTAINER_OR_QUEUE.fullmatch(name):
        raise InvalidName(
            f"invalid queue name {name!r}: use 3-63 lowercase letters, digits and single "
            "hyphens, starting and ending with a letter or digit"
        )
    return name


def check_table_name(name: str) -> str:
    """Tables: 3-63 letters and digits, starting with a letter; 'tables' is reserved."""
    if not _TABLE.fullmatch(name) or name.lower() == "tables":
        raise InvalidName(
            f"invalid table name {name!r}: use 3-63 letters and digits, starting with a letter"
        )
    return name


def check_blob_name(name: str) -> str:
    """Blob names: 1-1024 characters, no control characters, no empty or dot-only segments.

    Empty and '.'/'..' segments are refused because URL normalisation would make the name
    address a different blob than the one the caller meant.
    """
    if not name or len(name) > MAX_BLOB_NAME:
        raise InvalidName(f"invalid blob name {name!r}: length must be 1-{MAX_BLOB_NAME}")
    if _CONTROL.search(name) or "\\" in name:
        raise InvalidName(f"invalid blob name {name!r}: control characters or backslash")
    if any(segment in ("", ".", "..") for segment in name.split("/")):
        raise InvalidName(f"invalid blob name {name!r}: empty, '.' or '..' path segment")
    return name


def utf16_size(text: str) -> int:
    """How many bytes Table Storage counts for ``text`` (stored as UTF-16): two a character
    for ASCII, counted without encoding. UnicodeEncodeError for a lone surrogate."""
    return 2 * len(text) if text.isascii() else len(text.encode("utf-16-le"))


def holds_lone_surrogate(value: object) -> bool:
    """Whether any text in ``value`` (JSON as parsed: dicts, lists, texts, keys included)
    holds a lone surrogate, which JSON may escape (``"\\udcff"``) but no UTF-8 text or storage
    request can carry. Searched in place: encoding a large body to find out would copy it
    twice."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def check_key(kind: str, value: str) -> str:
    """PartitionKey and RowKey: at most 1 KiB, none of / \\ # ? or control characters."""
    if not isinstance(value, str):
        raise InvalidName(f"{kind} must be a string, got {type(value).__name__}")
    try:
        size = utf16_size(value)
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes or escapes in JSON
        raise InvalidName(f"{kind} {value[:40]!r} is not valid Unicode text") from None
    if size > MAX_KEY_BYTES:
        raise InvalidName(f"{kind} {value[:40]!r}... is longer than 1 KiB")
    if _KEY_FORBIDDEN.search(value):
        raise InvalidName(f"{kind} {value!r} contains one of / \\ # ? or a control character")
    return value


def check_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """Blob metadata: identifier names, ASCII values, at most 8 KiB in all.

    Names are folded to lower case because Azure treats them case-insensitively.
    """
    total = 0
    result: dict[str, str] = {}
    for key, value in metadata.items():
        if not _IDENTIFIER.fullmatch(key):
            raise InvalidName(f"invalid metadata name {key!r}: must be an identifier")
        if not isinstance(value, str) or not value.isascii() or _CONTROL.search(value):
            raise InvalidName(f"metadata {key!r} must be printable ASCII text")
        total += len(key) + len(value)
        result[key.lower()] = value
    if total > MAX_METADATA_BYTES:
        raise TooLarge(f"blob metadata is {total} bytes, over the {MAX_METADATA_BYTES} limit")
    return result
