"""Job names and the idempotency key of each row.

The key is ``<job>:<row key>``. A job name holds no ``:``, so the first ``:`` separates the
two parts and the mapping is one-to-one: two jobs never share a key, whatever their rows'
keys, and a key reads back as the job and row it came from (in the ingress table, in the
audit). The row's key must itself be usable as part of an idempotency key: the ingress's
rule (1-200 characters, none of ``/ \\ # ?`` or control characters) applies to the whole.
"""

from __future__ import annotations

import re

from shared.bus.ingress import MAX_KEY_CHARS, check_idempotency_key
from shared.errors import InvalidName

MAX_JOB_CHARS = 64
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SEPARATOR = ":"


def check_job_name(name: str) -> str:
    """1-64 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or digit."""
    if not _JOB.fullmatch(name):
        raise InvalidName(
            f"invalid job name {name[:80]!r}: use 1-{MAX_JOB_CHARS} letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


def row_key_text(value: object) -> str:
    """A row's key as text: text as it is, an integer in decimal. Anything else (a float,
    whose text is not one value; a boolean; a structure) is refused with why."""
    if value is None or value == "":
        raise InvalidName("the row has no key")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidName(
            f"the row's key is a {type(value).__name__}; it must be text or an integer"
        )
    return str(value)


def idempotency_key(job: str, row_key: str) -> str:
    """The ingress key of ``row_key`` in ``job``; InvalidName saying why when the row's key
    cannot be part of one."""
    key = f"{job}{SEPARATOR}{row_key}"
    if len(key) > MAX_KEY_CHARS:
        room = MAX_KEY_CHARS - len(job) - len(SEPARATOR)
        raise InvalidName(
            f"the row's key is {len(row_key)} characters; at most {room} fit beside job {job!r}"
        )
    try:
        return check_idempotency_key(key)
    except InvalidName:
        raise InvalidName(
            f"the row's key {row_key[:80]!r} contains one of / \\ # ? or a control character, "
            "or is not valid Unicode"
        ) from None
