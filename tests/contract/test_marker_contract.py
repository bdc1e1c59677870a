"""The at-most-once markers' contract (shared/effects/markers.py), run against every backend
through the performer's endpoint rows: one insert wins per key, whoever races, and a key the
table cannot hold is refused with the project's error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from shared.bus.state.rows import TableRows
from shared.effects.markers import MARKER_ROW, EffectMarkers
from shared.errors import InvalidName
from tests.conftest import Backend, unique_name

AT = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


@pytest.fixture
async def markers(backend: Backend) -> AsyncIterator[EffectMarkers]:
    table = backend.account.table(unique_name("m"))
    await table.create_if_missing()
    yield EffectMarkers(TableRows(table))
    await table.delete_table()


async def test_the_first_mark_wins_and_every_later_one_finds_it(markers: EffectMarkers) -> None:
    assert not await markers.marked("k1")

    assert await markers.mark("k1", request_id="r1", at=AT)
    assert not await markers.mark("k1", request_id="r1", at=AT)
    assert not await markers.mark("k1", request_id="r2", at=AT)

    assert await markers.marked("k1")
    row = await markers.rows.get("k1", MARKER_ROW)
    assert row["request_id"] == "r1"
    assert row["marked_at"] == AT


async def test_racing_marks_of_one_key_have_one_winner(markers: EffectMarkers) -> None:
    won = await asyncio.gather(*(markers.mark("k2", request_id=f"r{n}", at=AT) for n in range(8)))
    assert won.count(True) == 1


async def test_keys_are_marked_independently(markers: EffectMarkers) -> None:
    assert await markers.mark("k3", request_id="r", at=AT)
    assert await markers.mark("k4", request_id="r", at=AT)


@pytest.mark.parametrize("key", ["a/b", "a#b", "line\nforged"])
async def test_a_key_the_table_cannot_hold_is_refused_with_the_projects_error(
    markers: EffectMarkers, key: str
) -> None:
    with pytest.raises(InvalidName):
        await markers.mark(key, request_id="r", at=AT)
