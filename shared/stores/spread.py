"""Text properties longer than one Table Storage property holds, spread across several.

Table Storage caps a property at 64 KiB (UTF-16: 32,768 ASCII characters) and an entity at
1 MiB over at most 252 properties. The bus keeps JSON texts in its rows (an endpoint's state,
the outgoing messages of an O(m) record, the ids an audit row names) that may outgrow one
property long before the entity is full. ``spread`` writes such a text as parts: the first
under the property's own name, the rest under ``<name>__1``, ``<name>__2``..., and the number
of parts under ``<name>__parts``. ``gathered`` joins them again. A text that fits one property
is written exactly as before, so a row keeps the layout every earlier version reads; only a
text that no earlier version could have stored at all takes the new one.

PostgreSQL rows hold any length and are never spread. Property names of the bus's rows are the
bus's own (``type``, ``data``, ``outgoing``...), never chosen by a sender, so ``__`` cannot
collide with a name of another meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.errors import CorruptRecord
from shared.stores.names import MAX_PROPERTY_BYTES, utf16_size
from shared.stores.table import Entity, TableValue

PARTS_SUFFIX = "__parts"
PART_SEPARATOR = "__"
ASCII_PART_CHARS = MAX_PROPERTY_BYTES // 2
"""UTF-16 stores an ASCII character in two bytes."""
ANY_PART_CHARS = MAX_PROPERTY_BYTES // 4
"""A code point outside the Basic Multilingual Plane takes four (a surrogate pair); splitting a
Python string never cuts a pair, since it is split by code points."""


def spread(entity: Entity) -> Entity:
    """``entity`` with every text too long for one property spread across parts."""
    if not any(_too_long(value) for value in entity.properties.values()):
        return entity
    properties: dict[str, TableValue] = {}
    for name, value in entity.properties.items():
        if isinstance(value, str) and _too_long(value):
            properties.update(_parts(name, value))
        else:
            properties[name] = value
    return Entity(entity.partition_key, entity.row_key, properties, entity.etag)


def gathered(entity: Entity) -> Entity:
    """``entity`` with every spread text joined again; CorruptRecord if its parts do not
    agree (a part missing, or not text)."""
    if not any(name.endswith(PARTS_SUFFIX) for name in entity.properties):
        return entity
    where = f"row {entity.partition_key!r}/{entity.row_key!r}"
    properties = gathered_properties(entity.properties, where)
    return Entity(entity.partition_key, entity.row_key, properties, entity.etag)


def gathered_properties(properties: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The same for a row's properties as any reader holds them (the audit reads tables with
    the SDK's own entities); ``where`` names the row in the error."""
    counts = {
        name.removesuffix(PARTS_SUFFIX): value
        for name, value in properties.items()
        if name.endswith(PARTS_SUFFIX)
    }
    joined = dict(properties)
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= 252:
            raise CorruptRecord(f"{where}: {name}{PARTS_SUFFIX} is {count!r}, not a part count")
        names = [name, *(f"{name}{PART_SEPARATOR}{n}" for n in range(1, count))]
        parts = [joined.pop(part, None) for part in names]
        if not all(isinstance(part, str) for part in parts):
            raise CorruptRecord(f"{where}: property {name!r} is missing some of its {count} parts")
        del joined[f"{name}{PARTS_SUFFIX}"]
        joined[name] = "".join(str(part) for part in parts)
    return joined


def _too_long(value: TableValue) -> bool:
    # Only texts are spread: the bus keeps no long binary property. Measured as the service
    # does, so that every text that fits one property keeps the layout earlier versions read.
    if not isinstance(value, str) or len(value) <= ANY_PART_CHARS:
        return False
    return utf16_size(value) > MAX_PROPERTY_BYTES


def _parts(name: str, text: str) -> dict[str, TableValue]:
    size = ASCII_PART_CHARS if text.isascii() else ANY_PART_CHARS
    pieces = [text[at : at + size] for at in range(0, len(text), size)]
    parts: dict[str, TableValue] = {name: pieces[0], f"{name}{PARTS_SUFFIX}": len(pieces)}
    for number, piece in enumerate(pieces[1:], 1):
        parts[f"{name}{PART_SEPARATOR}{number}"] = piece
    return parts
