"""NCRONTAB schedules, as Azure Functions timer triggers read them.

Six fields, seconds first: ``second minute hour day month day-of-week``. Each field takes
``*``, a value, a range ``a-b``, a list ``a,b``, and steps ``*/n``, ``a-b/n`` or ``a/n``; months
and week days may be named (``Jan``, ``Mon``). Week days run 0-6 from Sunday (7 is Sunday too).
As in the NCrontab library the Functions host uses, a time must match *both* the day-of-month
and the day-of-week field (classic cron matches either when both are restricted).
Times are UTC, the Functions default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.errors import ConfigurationError

_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_SEARCH_YEARS = 5
"""Give up looking for the next time after this long: the schedule can never match
(e.g. 30 February)."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0


_FIELDS = (
    _Field("second", 0, 59),
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day", 1, 31),
    _Field("month", 1, 12, tuple(_MONTHS), 1),
    _Field("day-of-week", 0, 7, tuple(_DAYS), 0),
)


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule; ``next_after`` finds the next time it fires."""

    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday ... 6 = Saturday."""

    @classmethod
    def parse(cls, expression: str) -> Schedule:
        parts = expression.split()
        if len(parts) != 6:
            raise ConfigurationError(
                f"invalid NCRONTAB schedule {expression!r}: expected 6 fields "
                "'second minute hour day month day-of-week', e.g. '0 */5 * * * *', "
                f"got {len(parts)}"
            )
        sets = [
            _parse_field(part, field, expression)
            for part, field in zip(parts, _FIELDS, strict=True)
        ]
        second, minute, hour, day, month, weekday = sets
        return cls(expression, second, minute, hour, day, month, frozenset(d % 7 for d in weekday))

    def matches(self, moment: datetime) -> bool:
        return (
            moment.second in self.seconds
            and moment.minute in self.minutes
            and moment.hour in self.hours
            and self._day_matches(moment)
        )

    def _day_matches(self, moment: datetime) -> bool:
        return (
            moment.month in self.months
            and moment.day in self.days
            and _weekday(moment) in self.weekdays
        )

    def next_after(self, moment: datetime) -> datetime:
        """The first time strictly after ``moment`` (whole seconds, UTC) that matches."""
        if moment.tzinfo is None:
            raise ConfigurationError("next_after needs an aware datetime (UTC)")
        t = moment.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
        limit = t + timedelta(days=366 * _SEARCH_YEARS)
        # Coarse to fine: skip whole days, then hours, then minutes, so that a sparse schedule
        # costs a few thousand steps at most.
        while t < limit:
            if not self._day_matches(t):
                t = t.replace(hour=0, minute=0, second=0) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0, second=0) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t = t.replace(second=0) + timedelta(minutes=1)
            elif t.second not in self.seconds:
                t += timedelta(seconds=1)
            else:
                return t
        raise ConfigurationError(
            f"NCRONTAB schedule {self.expression!r} never fires within {_SEARCH_YEARS} years"
        )


def _weekday(moment: datetime) -> int:
    return moment.isoweekday() % 7  # Monday=1 ... Sunday=7 -> 0


def _parse_field(text: str, field: _Field, expression: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        values |= _parse_item(item, field, expression)
    return frozenset(values)


def _parse_item(item: str, field: _Field, expression: str) -> set[int]:
    def bad(why: str) -> ConfigurationError:
        return ConfigurationError(
            f"invalid NCRONTAB schedule {expression!r}: {field.name} field {item!r}: {why}"
        )

    span, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) == 0:
            raise bad("the step after '/' must be a positive whole number")
        step = int(step_text)
    if span == "*":
        low, high = field.low, field.high
    elif "-" in span:
        first, _, last = span.partition("-")
        low, high = _value(first, field, bad), _value(last, field, bad)
        if low > high:
            raise bad(f"range start {low} is after its end {high}")
    else:
        low = _value(span, field, bad)
        high = field.high if slash else low  # 'a/n' means from a to the end, every n
    return set(range(low, high + 1, step))


def _value(text: str, field: _Field, bad: Callable[[str], ConfigurationError]) -> int:
    lowered = text.strip().lower()
    if lowered in field.names:
        return field.names.index(lowered) + field.names_start
    if not lowered.isdigit():
        named = f" or a name like {field.names[0]!r}" if field.names else ""
        raise bad(f"expected a number{named}")
    value = int(lowered)
    if not field.low <= value <= field.high:
        raise bad(f"{value} is outside {field.low}-{field.high}")
    return value
