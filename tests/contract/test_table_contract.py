"""The table contract, run against every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.errors import (
    AlreadyExists,
    InvalidName,
    InvalidValue,
    NotFound,
    PreconditionFailed,
    TooLarge,
    TransactionFailed,
)
from shared.stores.table import Delete, Entity, Insert, Table, TableValue, Update, Upsert
from tests.conftest import Backend, unique_name


@pytest.fixture
async def table(backend: Backend) -> AsyncIterator[Table]:
    table = backend.account.table(unique_name("t"))
    await table.create_if_missing()
    yield table
    await table.delete_table()


def row(pk: str, rk: str, **properties: object) -> Entity:
    return Entity(pk, rk, properties)  # type: ignore[arg-type]


async def test_insert_then_get_round_trips_every_supported_type(table: Table) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=2)))
    values: dict[str, TableValue] = {
        "text": "héllo ☃",
        "small": 42,
        "big": 2**40 + 3,
        "negative": -(2**35),
        "ratio": 0.25,
        "whole_float": 2.0,
        "flag": True,
        "raw": b"\x00\x01\xff",
        "when": when,
    }
    etag = await table.insert(Entity("p", "r", values))

    got = await table.get("p", "r")

    assert got.etag == etag
    assert got.properties == {**values, "when": when.astimezone(UTC)}
    assert type(got["whole_float"]) is float
    assert type(got["flag"]) is bool


async def test_insert_refuses_a_taken_key(table: Table) -> None:
    await table.insert(row("p", "r", v=1))
    with pytest.raises(AlreadyExists):
        await table.insert(row("p", "r", v=2))
    assert (await table.get("p", "r"))["v"] == 1


async def test_get_missing_is_not_found(table: Table) -> None:
    with pytest.raises(NotFound):
        await table.get("p", "nope")


async def test_update_is_guarded_by_the_etag(table: Table) -> None:
    etag = await table.insert(row("p", "state", balance=10))

    etag2 = await table.update(row("p", "state", balance=5), etag=etag)
    with pytest.raises(PreconditionFailed):
        await table.update(row("p", "state", balance=0), etag=etag)

    got = await table.get("p", "state")
    assert got["balance"] == 5
    assert got.etag == etag2 != etag


async def test_update_replaces_all_properties_and_needs_an_existing_entity(table: Table) -> None:
    await table.insert(row("p", "r", a=1, b=2))
    await table.update(row("p", "r", a=3))
    assert (await table.get("p", "r")).properties == {"a": 3}
    with pytest.raises(NotFound):
        await table.update(row("p", "absent", a=1))


async def test_upsert_inserts_or_replaces(table: Table) -> None:
    await table.upsert(row("p", "r", a=1))
    await table.upsert(row("p", "r", b=2))
    assert (await table.get("p", "r")).properties == {"b": 2}


async def test_delete_is_idempotent_and_etag_guarded(table: Table) -> None:
    etag = await table.insert(row("p", "r"))
    await table.update(row("p", "r", x=1), etag=etag)

    with pytest.raises(PreconditionFailed):
        await table.delete("p", "r", etag=etag)
    await table.delete("p", "r")
    await table.delete("p", "r")

    with pytest.raises(NotFound):
        await table.get("p", "r")


async def test_query_filters_by_partition_prefix_and_row_keys(table: Table) -> None:
    for pk, rk in [
        ("a", "state"),
        ("a", "outbox|1"),
        ("a", "outbox|2"),
        ("a", "audit|1"),
        ("b", "outbox|3"),
        ("b", "state"),
    ]:
        await table.insert(row(pk, rk))

    async def keys(**filters: object) -> list[tuple[str, str]]:
        page = await table.query(**filters)  # type: ignore[arg-type]
        assert page.continuation is None
        return [(e.partition_key, e.row_key) for e in page.entities]

    assert await keys(partition_key="a") == [
        ("a", "audit|1"),
        ("a", "outbox|1"),
        ("a", "outbox|2"),
        ("a", "state"),
    ]
    assert await keys(row_key_prefix="outbox|") == [
        ("a", "outbox|1"),
        ("a", "outbox|2"),
        ("b", "outbox|3"),
    ]
    assert await keys(partition_key="a", row_keys=["state", "outbox|2", "outbox|9"]) == [
        ("a", "outbox|2"),
        ("a", "state"),
    ]
    assert await keys(partition_key="a", row_keys=[]) == []
    assert len(await keys()) == 6


async def test_query_pages_resume_from_a_continuation_token(table: Table) -> None:
    expected = [(f"p{i % 3}", f"r{i:02d}") for i in range(10)]
    for pk, rk in expected:
        await table.insert(row(pk, rk))

    seen: list[tuple[str, str]] = []
    continuation: str | None = None
    pages = 0
    while True:
        page = await table.query(page_size=4, continuation=continuation)
        pages += 1
        assert len(page.entities) <= 4
        seen += [(e.partition_key, e.row_key) for e in page.entities]
        continuation = page.continuation
        if continuation is None:
            break
        assert isinstance(continuation, str)

    assert seen == sorted(expected)
    assert pages >= 3
    assert [e.row_key async for e in table.query_all(partition_key="p1", page_size=2)] == [
        "r01",
        "r04",
        "r07",
    ]


async def test_transaction_commits_every_operation_together(table: Table) -> None:
    state_etag = await table.insert(row("p", "state", n=1))
    await table.insert(row("p", "old"))

    etags = await table.transact(
        [
            Update(row("p", "state", n=2), etag=state_etag),
            Insert(row("p", "outbox|m", status="committed")),
            Upsert(row("p", "audit|m", by="e")),
            Delete("p", "old"),
        ]
    )

    assert etags[3] is None
    assert (await table.get("p", "state")).etag == etags[0]
    assert (await table.get("p", "state"))["n"] == 2
    assert (await table.get("p", "outbox|m")).etag == etags[1]
    await table.update(row("p", "audit|m", by="f"), etag=etags[2])
    with pytest.raises(NotFound):
        await table.get("p", "old")


async def test_a_transaction_round_trips_every_supported_type_and_awkward_keys(
    table: Table,
) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=-5)))
    values: dict[str, TableValue] = {
        "text": "héllo ☃ \"quoted\" 'single' \r\n--boundary-like",
        "small": -42,
        "big": 2**40 + 3,
        "ratio": 0.25,
        "whole_float": 2.0,
        "flag": False,
        "raw": b"\x00\x01\xff",
        "when": when,
    }
    keys = ["it's", "a|b c", "ünï", "100%"]
    first = await table.insert(row("p k", keys[1], v=1))

    etags = await table.transact(
        [
            Insert(Entity("p k", keys[0], values)),
            Update(Entity("p k", keys[1], values), etag=first),
            Upsert(Entity("p k", keys[2], values)),
            Upsert(Entity("p k", keys[3], values)),
        ]
    )

    for key, etag in zip(keys, etags, strict=True):
        got = await table.get("p k", key)
        assert got.etag == etag
        assert got.properties == {**values, "when": when.astimezone(UTC)}
        assert type(got["whole_float"]) is float
    await table.transact([Delete("p k", keys[0], etag=etags[0]), Delete("p k", keys[3])])
    assert [e.row_key async for e in table.query_all(partition_key="p k")] == keys[1:3]


@pytest.mark.parametrize(
    ("failing", "cause"),
    [
        (lambda etag: Insert(row("p", "taken")), AlreadyExists),
        (lambda etag: Update(row("p", "taken", v=9), etag='W/"stale"'), PreconditionFailed),
        (lambda etag: Update(row("p", "absent", v=9)), NotFound),
        (lambda etag: Delete("p", "absent"), NotFound),
        (lambda etag: Delete("p", "taken", etag='W/"stale"'), PreconditionFailed),
    ],
)
async def test_a_failing_operation_rejects_the_whole_transaction_and_names_its_index(
    table: Table, failing: object, cause: type[Exception]
) -> None:
    etag = await table.insert(row("p", "taken", v=1))
    make = failing

    with pytest.raises(TransactionFailed) as raised:
        await table.transact(
            [
                Insert(row("p", "new1")),
                Upsert(row("p", "new2")),
                make(etag),  # type: ignore[operator]
            ]
        )

    assert raised.value.index == 2
    assert isinstance(raised.value.cause, cause)
    remaining = [e.row_key async for e in table.query_all(partition_key="p")]
    assert remaining == ["taken"]
    assert (await table.get("p", "taken"))["v"] == 1


async def test_transactions_hold_at_most_one_hundred_operations(table: Table) -> None:
    await table.transact([Insert(row("p", f"r{i:03d}")) for i in range(100)])
    assert len([e async for e in table.query_all(partition_key="p")]) == 100

    with pytest.raises(TooLarge):
        await table.transact([Insert(row("q", f"r{i:03d}")) for i in range(101)])
    assert [e async for e in table.query_all(partition_key="q")] == []


async def test_transactions_stay_in_one_partition_and_touch_each_entity_once(
    table: Table,
) -> None:
    with pytest.raises(InvalidValue):
        await table.transact([Insert(row("p", "a")), Insert(row("q", "a"))])
    with pytest.raises(InvalidValue):
        await table.transact([Insert(row("p", "a")), Upsert(row("p", "a"))])
    with pytest.raises(InvalidValue):
        await table.transact([])
    assert [e async for e in table.query_all()] == []


@pytest.mark.parametrize("key", ["a/b", "a#b", "a?b", "a\\b", "tab\t", "x" * 600])
async def test_invalid_keys_are_refused(table: Table, key: str) -> None:
    with pytest.raises(InvalidName):
        await table.insert(row(key, "r"))
    with pytest.raises(InvalidName):
        await table.insert(row("p", key))


async def test_values_azure_would_refuse_are_refused(table: Table) -> None:
    with pytest.raises(TooLarge):
        await table.insert(row("p", "big", blob="x" * 40_000))
    with pytest.raises(InvalidValue):
        await table.insert(row("p", "naive", when=datetime(2026, 1, 1)))
    with pytest.raises(InvalidValue):
        await table.insert(row("p", "huge", n=2**64))
    with pytest.raises(InvalidValue):
        await table.insert(row("p", "list", items=[1, 2]))
    with pytest.raises(InvalidName):
        await table.insert(row("p", "reserved", PartitionKey="x"))
    assert [e async for e in table.query_all()] == []


async def test_a_missing_table_is_not_found(backend: Backend) -> None:
    table = backend.account.table(unique_name("missing"))
    with pytest.raises(NotFound):
        await table.insert(row("p", "r"))
    with pytest.raises(NotFound):
        await table.get("p", "r")


@pytest.mark.parametrize("name", ["ab", "1abc", "has-hyphen", "tables"])
def test_invalid_table_names_are_refused(backend: Backend, name: str) -> None:
    with pytest.raises(InvalidName):
        backend.account.table(name)
