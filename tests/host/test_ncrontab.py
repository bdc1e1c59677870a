"""NCRONTAB parsing and next-occurrence search, as the Functions timer trigger reads them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lab.host.ncrontab import Schedule
from shared.errors import ConfigurationError

T0 = datetime(2026, 3, 14, 10, 7, 30, tzinfo=UTC)  # a Saturday


def nexts(expression: str, start: datetime, count: int) -> list[str]:
    schedule, found, moment = Schedule.parse(expression), [], start
    for _ in range(count):
        moment = schedule.next_after(moment)
        found.append(moment.strftime("%a %Y-%m-%d %H:%M:%S"))
    return found


def test_every_five_minutes_on_the_minute() -> None:
    assert nexts("0 */5 * * * *", T0, 3) == [
        "Sat 2026-03-14 10:10:00",
        "Sat 2026-03-14 10:15:00",
        "Sat 2026-03-14 10:20:00",
    ]


def test_seconds_field_comes_first_and_next_is_strictly_after() -> None:
    assert nexts("*/15 * * * * *", T0, 3) == [
        "Sat 2026-03-14 10:07:45",
        "Sat 2026-03-14 10:08:00",
        "Sat 2026-03-14 10:08:15",
    ]
    exact = datetime(2026, 3, 14, 10, 10, 0, tzinfo=UTC)
    assert Schedule.parse("0 */5 * * * *").next_after(exact) > exact


def test_lists_ranges_steps_and_names() -> None:
    # 9:30 and 17:30 on weekdays only: the Saturday start rolls to Monday.
    assert nexts("0 30 9,17 * * Mon-Fri", T0, 3) == [
        "Mon 2026-03-16 09:30:00",
        "Mon 2026-03-16 17:30:00",
        "Tue 2026-03-17 09:30:00",
    ]
    assert nexts("0 0 0 1 jan,JUL *", T0, 2) == [
        "Wed 2026-07-01 00:00:00",
        "Fri 2027-01-01 00:00:00",
    ]
    assert nexts("0 0 8-20/6 * * *", T0, 3) == [
        "Sat 2026-03-14 14:00:00",
        "Sat 2026-03-14 20:00:00",
        "Sun 2026-03-15 08:00:00",
    ]
    assert nexts("10/20 * * * * *", T0, 2) == [
        "Sat 2026-03-14 10:07:50",
        "Sat 2026-03-14 10:08:10",
    ]


def test_day_of_month_and_day_of_week_must_both_match_and_seven_is_sunday() -> None:
    # The 13th that is a Friday, as NCrontab reads it (classic cron would take either).
    assert nexts("0 0 12 13 * 5", T0, 2) == [
        "Fri 2026-11-13 12:00:00",
        "Fri 2027-08-13 12:00:00",
    ]
    assert Schedule.parse("0 0 0 * * 7").weekdays == Schedule.parse("0 0 0 * * 0").weekdays


def test_leap_day_is_found_years_ahead() -> None:
    assert nexts("0 0 0 29 2 *", T0, 1) == ["Tue 2028-02-29 00:00:00"]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("*/5 * * * *", "expected 6 fields"),
        ("0 60 * * * *", "minute field '60': 60 is outside 0-59"),
        ("0 0 25 * * *", "hour field '25'"),
        ("0 0 0 0 * *", "day field '0'"),
        ("0 0 0 * 13 *", "month field '13'"),
        ("0 0 0 * foo *", "or a name like 'jan'"),
        ("0 */0 * * * *", "step after '/' must be a positive"),
        ("0 0 10-5 * * *", "range start 10 is after its end 5"),
        ("00:05:00", "expected 6 fields"),
    ],
)
def test_bad_schedules_are_refused_with_the_field_named(expression: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace("*", r"\*")):
        Schedule.parse(expression)


def test_a_schedule_that_never_fires_is_reported() -> None:
    with pytest.raises(ConfigurationError, match="never fires"):
        Schedule.parse("0 0 0 30 2 *").next_after(T0)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="aware"):
        Schedule.parse("* * * * * *").next_after(datetime(2026, 1, 1))
