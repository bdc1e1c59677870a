"""The window modes' rows contract (``shared.bus.state.rows``), run against every store: Table
Storage in memory and on Azurite, the in-memory model of PostgreSQL and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.bus.state.base import EndpointState
from shared.bus.state.rows import ModeRows
from shared.errors import (
    AlreadyExists,
    InvalidValue,
    NotFound,
    PreconditionFailed,
    TransactionFailed,
)
from shared.stores.table import Delete, Entity, Insert, TableValue, Update, Upsert
from tests.contract.test_endpoint_state_contract import (
    any_store,  # noqa: F401  (fixture "store": one per store)
    audit,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def rows(store: EndpointState) -> ModeRows:
    return store.rows()


def row(partition: str = "p1", key: str = "processed|m1", **properties: TableValue) -> Entity:
    values: dict[str, TableValue] = {"committed_at": T0, "outgoing": "[]", **properties}
    return Entity(partition, key, values)


async def commit(rows: ModeRows, *operations: Insert | Update, message: str = "m1") -> list[str]:
    async with rows.begin() as transaction:
        partition = operations[0].entity.partition_key  # one partition, as on Table Storage
        versions = await transaction.commit(list(operations), audit(partition, message))
    return [str(v) for v in versions]


async def test_absent_rows_read_as_nothing(rows: ModeRows) -> None:
    assert await rows.read("p1", ["state", "processed|m1"]) == {}
    with pytest.raises(NotFound):
        await rows.get("p1", "state")


async def test_a_commit_writes_rows_and_the_audit_row_together(
    store: EndpointState, rows: ModeRows
) -> None:
    state = Entity("p1", "state", {"type": "Counter", "data": '{"n": 1}'})
    versions = await commit(rows, Insert(state), Insert(row()))

    found = await rows.read("p1", ["state", "processed|m1", "processed|m2"])

    assert sorted(found) == ["processed|m1", "state"]
    assert [found["state"].etag, found["processed|m1"].etag] == versions
    assert found["processed|m1"]["committed_at"] == T0
    assert [str(e["message_id"]) async for e in store.audit_entities()] == ["m1"]
    assert [(s.partition_key, s.data) async for s in store.states()] == [("p1", '{"n": 1}')]


async def test_property_types_come_back_as_they_went_in(rows: ModeRows) -> None:
    values: dict[str, TableValue] = {
        "text": "a\x00b é",
        "count": 2**40,
        "flag": True,
        "ratio": math.pi,
        "raw": b"\x00\xff",
        "at": datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC),
    }
    await commit(rows, Insert(Entity("p1", "version|1", values)))

    stored = await rows.get("p1", "version|1")

    assert dict(stored.properties) == values
    assert {k: type(v) for k, v in stored.properties.items()} == {
        k: type(v) for k, v in values.items()
    }


async def test_an_existing_row_fails_the_whole_commit(store: EndpointState, rows: ModeRows) -> None:
    await commit(rows, Insert(row()), message="m0")
    state = Entity("p1", "state", {"type": "Counter", "data": "{}"})

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Insert(state), Insert(row(outgoing="[1]")))

    assert failed.value.index == 1
    assert isinstance(failed.value.cause, AlreadyExists)
    assert await rows.read("p1", ["state"]) == {}  # the state insert was not applied
    assert (await rows.get("p1", "processed|m1"))["outgoing"] == "[]"
    assert [str(e["message_id"]) async for e in store.audit_entities()] == ["m0"]


async def test_a_stale_version_fails_the_whole_commit(rows: ModeRows) -> None:
    [version] = await commit(rows, Insert(Entity("p1", "state", {"data": "1"})), message="m0")
    await rows.update(Entity("p1", "state", {"data": "2"}), version)

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Update(Entity("p1", "state", {"data": "3"}), version), Insert(row()))

    assert failed.value.index == 0
    assert isinstance(failed.value.cause, PreconditionFailed)
    assert (await rows.get("p1", "state"))["data"] == "2"
    assert await rows.read("p1", ["processed|m1"]) == {}


async def test_an_existing_audit_row_fails_the_commit(rows: ModeRows) -> None:
    await commit(rows, Insert(row(key="processed|m0")), message="m1")

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Insert(row()), message="m1")

    assert failed.value.index == 1  # after the rows: the audit row
    assert await rows.read("p1", ["processed|m1"]) == {}


async def test_only_one_of_two_concurrent_commits_wins(rows: ModeRows) -> None:
    async def attempt(n: int) -> str:
        try:
            await commit(rows, Insert(row(outgoing=f"[{n}]")), message=f"m{n}")
        except TransactionFailed:
            return "lost"
        return "won"

    results = await asyncio.gather(attempt(1), attempt(2))

    assert sorted(results) == ["lost", "won"]


async def test_leaving_without_commit_writes_nothing(rows: ModeRows) -> None:
    async with rows.begin():
        pass
    with pytest.raises(RuntimeError):
        async with rows.begin():
            raise RuntimeError("the handler failed")
    assert await rows.read("p1", ["state"]) == {}


async def test_only_inserts_and_guarded_updates_are_committed(rows: ModeRows) -> None:
    for operation in (
        Upsert(row()),
        Delete("p1", "processed|m1"),
        Update(row(), etag=None),
    ):
        with pytest.raises(InvalidValue):
            async with rows.begin() as transaction:
                await transaction.commit([operation], audit())
    assert await rows.read("p1", ["processed|m1"]) == {}


async def test_updates_and_deletes_are_guarded_by_the_version(rows: ModeRows) -> None:
    [version] = await commit(rows, Insert(row()))

    newer = await rows.update(row(outgoing="[2]"), version)

    assert newer != version
    with pytest.raises(PreconditionFailed):
        await rows.update(row(outgoing="[3]"), version)
    with pytest.raises(PreconditionFailed):
        await rows.delete("p1", "processed|m1", version)
    await rows.delete("p1", "processed|m1", newer)
    await rows.delete("p1", "processed|m1", newer)  # gone: nothing to do
    with pytest.raises(NotFound):
        await rows.update(row(), newer)


async def test_a_version_is_never_handed_out_twice(rows: ModeRows) -> None:
    [first] = await commit(rows, Insert(row()), message="m1")
    await rows.delete("p1", "processed|m1")
    [second] = await commit(rows, Insert(row()), message="m2")

    with pytest.raises(PreconditionFailed):
        await rows.update(row(outgoing="[9]"), first)
    assert second != first


async def test_pages_follow_key_order_by_prefix_or_exact_key(rows: ModeRows) -> None:
    keys = [("p2", "processed|a"), ("p1", "processed|b"), ("p1", "processed|a"), ("p1", "state")]
    for n, (partition, key) in enumerate(keys):
        await commit(rows, Insert(row(partition, key)), message=f"m{n}")

    seen: list[tuple[str, str]] = []
    continuation: str | None = None
    while True:
        page, continuation = await rows.page(
            row_key_prefix="processed|", page_size=2, continuation=continuation
        )
        assert len(page) <= 2
        seen += [(e.partition_key, e.row_key) for e in page]
        if continuation is None:
            break
    states, _ = await rows.page(row_key="state", page_size=10)

    assert seen == [("p1", "processed|a"), ("p1", "processed|b"), ("p2", "processed|a")]
    assert [(e.partition_key, e.row_key) for e in states] == [("p1", "state")]


async def test_hostile_keys_are_data_not_syntax(rows: ModeRows) -> None:
    partition = "p'; DROP TABLE bus.mode_rows; --"
    await commit(rows, Insert(row(partition, "processed|%_'")))

    found = await rows.read(partition, ["processed|%_'", "processed|%"])
    page, _ = await rows.page(row_key_prefix="processed|%", page_size=10)

    assert list(found) == ["processed|%_'"]
    assert [e.row_key for e in page] == ["processed|%_'"]
    assert await rows.read("p1", ["processed|%_'"]) == {}


async def test_committed_rows_keep_their_time_in_utc(rows: ModeRows) -> None:
    local = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    await commit(rows, Insert(row(committed_at=local)))

    stored = (await rows.get("p1", "processed|m1"))["committed_at"]

    assert stored == local
    assert isinstance(stored, datetime)
    assert stored.utcoffset() == timedelta(0)
