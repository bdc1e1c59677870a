"""Format versions of the records that outlive the code that wrote them: the envelope and the
signal (JSON field ``v``), the poison wrapper (``v``), token metadata (key ``format``), O(m)
and the ingress record (entity property ``format``; in PostgreSQL, within the row's
properties).

Version 1 is what releases before format versions wrote, with no version field; version 2 is
version 1 plus the field. A reader takes an absent version as 1, reads every version up to
``NEWEST``, raises NewerVersion for a higher one (a newer instance wrote it: a rolling deploy
gives it to an upgraded instance) and its own malformed-input error for anything that is not
a version. It checks the version before anything else: a newer format may have other fields.

What an instance writes is BUS_WIRE_FORMAT (``BusConfig.wire_format``): 1 while instances of
a release before format versions run (their readers refuse unknown fields), else 2.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from shared.errors import BusError, CorruptRecord, NewerVersion
from shared.logsafe import shown

FIRST = 1
"""The format of a record without a version field."""
NEWEST = 2
"""The newest format this version reads and writes."""
MAX_VERSION = 2**31 - 1
"""A version is a positive 32-bit integer (what an entity's int property holds); a larger
number is damage, not a release."""
JSON_FIELD = "v"
METADATA_KEY = "format"
PROPERTY = "format"
_METADATA_TEXT = re.compile(r"[1-9][0-9]{0,9}")


def checked(version: object, record: str, malformed: type[BusError] = CorruptRecord) -> int:
    """The format ``version`` (absent: None) of ``record`` (named for the error), if this
    instance reads it. NewerVersion for a newer one, ``malformed`` for what is no version."""
    if version is None:
        return FIRST
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise malformed(
            f"{record}: format version {shown(repr(version), 40)} is not a whole number "
            f"from 1 to {MAX_VERSION}"
        )
    if version > NEWEST:
        raise NewerVersion(
            f"{record} has format version {version}, written by a newer version of the bus; "
            f"this version reads formats up to {NEWEST}: an upgraded version reads it"
        )
    return version


def json_version(data: object, record: str, malformed: type[BusError] = CorruptRecord) -> int:
    """The version of a JSON record (its top-level ``v``); a record that is not a JSON
    object is ``malformed``."""
    if not isinstance(data, dict):
        raise malformed(f"{record} is not a JSON object")
    return checked(data.get(JSON_FIELD), record, malformed)


def metadata_version(metadata: Mapping[str, str], record: str) -> int:
    """The version in a blob's metadata (``format``, decimal text as metadata holds it)."""
    text = metadata.get(METADATA_KEY)
    if text is None:
        return FIRST
    if not _METADATA_TEXT.fullmatch(text):
        raise CorruptRecord(
            f"{record}: format version {shown(repr(text), 40)} in its metadata is not a "
            f"whole number from 1 to {MAX_VERSION}"
        )
    return checked(int(text), record)


def property_version(properties: Mapping[str, object], record: str) -> int:
    """The version of a table row (its ``format`` property)."""
    return checked(properties.get(PROPERTY), record)


def stated(version: int) -> int | None:
    """The ``v`` a JSON record of ``version`` carries: none (None) in the first format."""
    return None if version == FIRST else version


def metadata_fields(version: int) -> dict[str, str]:
    """What a blob's metadata of ``version`` carries to say so."""
    return {} if version == FIRST else {METADATA_KEY: str(version)}


def property_fields(version: int) -> dict[str, int]:
    """What a table row of ``version`` carries to say so."""
    return {} if version == FIRST else {PROPERTY: version}
