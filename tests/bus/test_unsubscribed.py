"""The record of events dropped for want of a subscriber: counts, first and last times, and a
reader that anyone able to write the blob's metadata cannot make fail or lie in times."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from shared.bus.unsubscribed import (
    COUNT,
    FIRST,
    LAST,
    PREFIX,
    TopicDrops,
    UnsubscribedEvents,
    subscribe_hint,
    unsubscribed_counts,
    unsubscribed_drops,
)
from shared.clock import ManualClock
from shared.stores.blob import BlobContainer
from tests.conftest import Backend, unique_name

T1 = 1_800_000_000.0
T2 = T1 + 3600.5


async def topics_of(backend: Backend) -> BlobContainer:
    container = backend.account.blob_container(unique_name("topics"))
    await container.create_if_missing()
    return container


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


async def test_drops_are_counted_with_the_first_and_the_last_time(backend: Backend) -> None:
    container = await topics_of(backend)
    clock = ManualClock(T1)
    events = UnsubscribedEvents(container, clock)

    await events.record("noted", "Noted", "orders", [])
    clock.now = T2
    await events.record("noted", "Noted", "orders", [])
    await events.record("other", "Other", "orders", [])

    assert await unsubscribed_drops(container) == [
        TopicDrops("noted", 2, at(T1), at(T2)),
        TopicDrops("other", 1, at(T2), at(T2)),
    ]
    assert await unsubscribed_counts(container) == {"noted": 2, "other": 1}


BASE = datetime(2026, 1, 1, 12, tzinfo=UTC)


def after_base(seconds: int | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(BASE.timestamp() + seconds, UTC)


@pytest.mark.parametrize(
    ("count", "first", "last", "read"),
    [
        ("7", "2026-01-01T12:00:00+00:00", "2026-01-02T12:00:00+01:00", (7, 0, 23 * 3600)),
        ("12abc", "yesterday", "9999-99-99", (0, None, None)),
        ("-3", "2026-01-01T12:00:00", "2026-01-01", (0, None, None)),  # no offset: unknown
        ("0x1F", "2026-01-01T12:00:00+00:00" + "0" * 40, "1e9", (0, None, None)),
        ("9" * 40, "", "2026-01-01T12:00:00Z", (int("9" * 18), None, 0)),
        ("1", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", (1, None, None)),
    ],
)
async def test_hostile_metadata_reads_as_unknown_and_never_fails_the_reader(
    backend: Backend, count: str, first: str, last: str, read: tuple[int, int | None, int | None]
) -> None:
    container = await topics_of(backend)
    await container.create(f"{PREFIX}noted", b"", {COUNT: count, FIRST: first, LAST: last})
    await container.create(f"{PREFIX}Not_A_Topic", b"", {COUNT: "5"})  # no topic: left out

    [drops] = await unsubscribed_drops(container)

    expected_count, first_offset, last_offset = read
    assert drops == TopicDrops(
        "noted", expected_count, after_base(first_offset), after_base(last_offset)
    )


def test_metadata_only_a_memory_store_could_hold_reads_as_unknown() -> None:
    """Azure refuses metadata that is not ASCII; anything else still reads as unknown."""
    from shared.bus.unsubscribed import parse_drops

    hostile = {
        COUNT: "\u0663",
        FIRST: "\u202e2026-01-01T12:00:00+00:00",
        LAST: "2026-01-01T12:00:00+00:00\n",
    }
    assert parse_drops("noted", hostile) == TopicDrops("noted", 0, None, None)


async def test_a_drop_after_damaged_metadata_keeps_the_first_time_unknown(
    backend: Backend,
) -> None:
    """Counting goes on over a damaged record; a first time it cannot read is not replaced by
    a later one, which would claim the drops began then."""
    container = await topics_of(backend)
    await container.create(f"{PREFIX}noted", b"", {COUNT: "x", FIRST: "soon"})

    await UnsubscribedEvents(container, ManualClock(T1)).record("noted", "Noted", "o", [])

    assert await unsubscribed_drops(container) == [TopicDrops("noted", 1, None, at(T1))]


async def test_a_record_that_cannot_be_written_does_not_fail_the_publisher(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    missing = backend.account.blob_container(unique_name("gone"))  # never created
    with caplog.at_level(logging.WARNING, logger="shared.bus.unsubscribed"):
        await UnsubscribedEvents(missing, ManualClock(T1)).record("noted", "Noted", "o", [])

    assert "could not count a dropped Noted" in caplog.text


def test_the_hint_offers_bus_subscribe_only_for_endpoints_that_take_the_events() -> None:
    assert subscribe_hint("noted", ["billing", "loyalty"]) == (
        "billing, loyalty take these events but are not subscribed: run "
        "`bus subscribe noted billing` and `bus subscribe noted loyalty`"
    )
    nobody = subscribe_hint("noted", [])
    assert "no endpoint of this app takes the events of topic noted" in nobody
    assert "add a handler for them to an endpoint" in nobody
    assert "`bus subscribe --all`" in nobody
