"""Stored rows whose fields cannot be read, met while going through many rows.

Anyone with write access to a store (an operator, a script, an attacker) can leave a row the
bus cannot read: text that is not JSON, a property missing or of the wrong type or shape. A
reader of one row (a message being processed) gets the error. A reader that pages through
many rows (the cleanup) must not let one such row keep every other row of its page from being
read, pass after pass: it hands the row to ``on_damaged`` (named by its table and key, with
what is wrong), goes on with the others and leaves the damaged row as it is. This is the same
on Table Storage, in PostgreSQL and in the in-memory model of PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shared.errors import CorruptRecord

ROW_ERRORS = (ValueError, KeyError, TypeError, CorruptRecord, RecursionError)
"""What a malformed record raises when it is read or its names are used (InvalidName,
InvalidValue and pydantic's ValidationError are ValueErrors). Storage errors are not among
them: they end the page, and the next pass reads it again."""

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class DamagedRow:
    """A row that could not be read: ``where`` names its table and key for a log, ``key`` is
    its (partition key, row key or message id), ``error`` says why."""

    where: str
    key: tuple[str, str]
    error: BaseException


OnDamaged = Callable[[DamagedRow], None]
"""Told of each damaged row a page passes over. Where none is given, the error is raised:
a caller that does not expect damage hears of it rather than missing a row silently."""


Where = Callable[[str, str], str]
"""How a store names the row of a key for a log (its table, endpoint and key)."""


def pass_over(on_damaged: OnDamaged | None, row: DamagedRow) -> None:
    """Hand a damaged row to ``on_damaged``, or raise its error when there is none."""
    if on_damaged is None:
        raise row.error
    on_damaged(row)


def read_each(
    rows: Sequence[R],
    parse: Callable[[R], T],
    key: Callable[[R], tuple[str, str]],
    where: Where,
    on_damaged: OnDamaged | None,
) -> list[T]:
    """Each row parsed, in order, without the ones that cannot be (see ``pass_over``)."""
    parsed: list[T] = []
    for row in rows:
        try:
            parsed.append(parse(row))
        except ROW_ERRORS as e:
            at = key(row)
            pass_over(on_damaged, DamagedRow(where(*at), at, e))
    return parsed
