"""A row's typed properties as JSON: each property as ``[type, value]``, so that a datetime,
bytes or a float come back as they went in (JSON alone would turn them into strings or lose
NaN). The one wire format of properties for every store that keeps rows as JSON text or
documents: PostgreSQL (``shared.bus.state.postgres_rows``) and the document stores
(``shared.bus.state.document_rows``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from shared.errors import CorruptRecord
from shared.stores.table import TableValue


def tagged_properties(properties: Mapping[str, TableValue]) -> dict[str, list[Any]]:
    """Each property as ``[type, value]``, ready for JSON."""
    encoded: dict[str, list[Any]] = {}
    for name, value in properties.items():
        if isinstance(value, bool):
            encoded[name] = ["bool", value]
        elif isinstance(value, int):
            encoded[name] = ["int", value]
        elif isinstance(value, float):
            encoded[name] = ["float", repr(value)]
        elif isinstance(value, datetime):
            encoded[name] = ["datetime", value.isoformat()]
        elif isinstance(value, bytes):
            encoded[name] = ["bytes", base64.b64encode(value).decode("ascii")]
        else:
            encoded[name] = ["str", value]
    return encoded


def untagged_properties(tagged: Any) -> dict[str, TableValue]:
    """The properties ``tagged_properties`` wrote; CorruptRecord for anything else."""
    try:
        return {name: _decode(tag, value) for name, (tag, value) in tagged.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise CorruptRecord(f"malformed row properties: {e}") from e


def encode_properties(properties: Mapping[str, TableValue]) -> str:
    """``tagged_properties`` as JSON text."""
    return json.dumps(tagged_properties(properties))


def decode_properties(text: str) -> dict[str, TableValue]:
    """The properties ``encode_properties`` wrote; CorruptRecord for anything else."""
    try:
        tagged = json.loads(text)
    except (ValueError, TypeError) as e:
        raise CorruptRecord(f"malformed row properties: {e}") from e
    return untagged_properties(tagged)


def _decode(tag: str, value: Any) -> TableValue:
    if tag == "bool":
        return bool(value)
    if tag == "int":
        return int(value)
    if tag == "float":
        return float(value)
    if tag == "datetime":
        return datetime.fromisoformat(value)
    if tag == "bytes":
        return base64.b64decode(value)
    if tag == "str":
        return str(value)
    raise ValueError(f"unknown property type {tag!r}")
