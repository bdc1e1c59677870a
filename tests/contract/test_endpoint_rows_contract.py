"""The endpoint-rows contract (``shared.bus.state.rows``) and token mode's typed rows over it
(``shared.bus.state.base``), run against every store: Table Storage in memory and on Azurite,
the in-memory model of PostgreSQL, the counting wrapper around it, and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.bus.records import AuditRecord, OutboxRecord
from shared.bus.state import rows as rows_module
from shared.bus.state.base import EndpointState, StateWrite
from shared.bus.state.connection import PostgresSettings
from shared.bus.state.document_rows import DocumentRows
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.bus.state.rows import EndpointRows, TableRows
from shared.bus.state.stores import PostgresDatabase
from shared.errors import (
    AlreadyExists,
    InvalidValue,
    NotFound,
    PreconditionFailed,
    TooLarge,
    TransactionFailed,
)
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.blob_documents import BlobDocuments
from shared.stores.instrumented import Instrumentation
from shared.stores.memory import MemoryStorageAccount
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.names import MAX_ENTITY_BYTES
from shared.stores.table import Delete, Entity, Insert, TableValue, Update, Upsert
from tests.conftest import unique_name
from tests.cosmos import cosmos_database

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(
    name="store",
    params=[
        "memory-table",
        pytest.param("azurite-table", marks=pytest.mark.azurite),
        "memory-sql",
        "instrumented-sql",
        pytest.param("postgres", marks=pytest.mark.postgres),
        "memory-cosmos",
        "memory-blob",
        pytest.param("azurite-blob", marks=pytest.mark.azurite),
        pytest.param("cosmos", marks=pytest.mark.cosmos),
    ],
)
async def any_store(request: pytest.FixtureRequest) -> AsyncIterator[EndpointState]:
    """A fresh endpoint's rows in the store named by the parameter."""
    name = unique_name("e")
    if request.param == "memory-table":
        table = MemoryStorageAccount().table(name)
        await table.create_if_missing()
        yield EndpointState(TableRows(table))
    elif request.param == "azurite-table":
        endpoints = request.getfixturevalue("azurite")
        settings = StorageSettings(connection_string=endpoints.connection_string)
        account = AzureStorageAccount(settings)
        table = account.table(name)
        await table.create_if_missing()
        yield EndpointState(TableRows(table))
        await table.delete_table()
        await account.close()
    elif request.param == "memory-sql":
        yield MemorySqlDatabase().endpoint_state(name)
    elif request.param == "memory-cosmos":
        yield EndpointState(DocumentRows(MemoryDocumentDatabase().endpoint_documents(name)))
    elif request.param == "memory-blob":
        container = MemoryStorageAccount().blob_container("rows")
        await container.create_if_missing()
        yield EndpointState(DocumentRows(BlobDocuments(container, name, 16 * 1024 * 1024)))
    elif request.param == "azurite-blob":
        endpoints = request.getfixturevalue("azurite")
        account = AzureStorageAccount(
            StorageSettings(connection_string=endpoints.connection_string)
        )
        container = account.blob_container(unique_name("rows"))
        await container.create_if_missing()
        yield EndpointState(DocumentRows(BlobDocuments(container, name, 16 * 1024 * 1024)))
        await container.delete_container()
        await account.close()
    elif request.param == "cosmos":
        async with cosmos_database(request.getfixturevalue("cosmos"), [name]) as cosmos:
            yield EndpointState(DocumentRows(cosmos.endpoint_documents(name)))
    elif request.param == "instrumented-sql":
        yield InstrumentedSql(MemorySqlDatabase(), Instrumentation()).endpoint_state(name)
    else:
        database = PostgresDatabase(PostgresSettings(url=request.getfixturevalue("postgres")))
        yield database.endpoint_state(name)
        await database.close()


@pytest.fixture
def rows(store: EndpointState) -> EndpointRows:
    return store.rows()


def claimed(partition: str = "p1", message: str = "m1") -> OutboxRecord:
    return OutboxRecord(partition, message, claim="c1", incoming_token="tok/1", started_at=T0)


def audit(partition: str = "p1", message: str = "m1", at: datetime = T0) -> AuditRecord:
    return AuditRecord(
        partition_key=partition,
        endpoint="e",
        message_id=message,
        message_type="Pay",
        source="ingress",
        correlation_id="corr",
        causation_id=None,
        sent_at=at,
        processed_at=at,
        mode="token",
    )


async def claim(store: EndpointState, partition: str = "p1", message: str = "m1") -> OutboxRecord:
    record = claimed(partition, message)
    return replace(record, etag=await store.insert_outbox(record))


def first_state(data: str = '{"n": 1}', partition: str = "p1") -> StateWrite:
    return StateWrite(partition, "Counter", data, expected=None)


async def test_an_empty_partition_reads_as_nothing(store: EndpointState) -> None:
    snapshot = await store.read("p1", "m1")
    assert snapshot.state is None
    assert snapshot.outbox is None


async def test_an_outbox_record_is_created_once(store: EndpointState) -> None:
    record = await claim(store)

    snapshot = await store.read("p1", "m1")

    assert snapshot.outbox == record
    assert snapshot.outbox.etag
    with pytest.raises(AlreadyExists):
        await store.insert_outbox(claimed())


async def test_a_commit_writes_state_outbox_and_audit_together(store: EndpointState) -> None:
    record = await claim(store)

    async with store.begin() as transaction:
        version = await transaction.commit(
            first_state(), record.committing([], ["lost-attempt"], T0), audit()
        )

    snapshot = await store.read("p1", "m1")
    assert snapshot.state is not None
    assert snapshot.outbox is not None
    assert json.loads(snapshot.state.data) == {"n": 1}
    assert snapshot.outbox.committed
    assert snapshot.outbox.abandoned == ("lost-attempt",)
    assert snapshot.outbox.etag == version != record.etag
    assert [e["message_id"] async for e in store.audit_entities()] == ["m1"]


LARGE_STATE = json.dumps({"lines": ["x" * 90 + f"{n:08d}" for n in range(3_000)]})
"""About 300,000 characters: nine times what one Table Storage property holds."""
WIDE_STATE = json.dumps({"notes": "\u00e9\U0001f600" * 40_000}, ensure_ascii=False)
"""Non-ASCII, with characters outside the Basic Multilingual Plane: 240,000 bytes in UTF-16."""


@pytest.mark.parametrize("data", [LARGE_STATE, WIDE_STATE], ids=["ascii", "astral"])
async def test_a_state_larger_than_a_property_commits_and_reads_back_whole(
    store: EndpointState, data: str
) -> None:
    record = await claim(store)
    async with store.begin() as transaction:
        await transaction.commit(first_state(data), record.committing([], [], T0), audit())

    snapshot = await store.read("p1", "m1")
    assert snapshot.state is not None
    assert snapshot.state.data == data
    assert [s.data async for s in store.states()] == [data]

    second = await claim(store, message="m2")
    updated = json.dumps({"lines": [data]}, ensure_ascii=False)
    write = StateWrite("p1", "Counter", updated, expected=snapshot.state.version)
    async with store.begin() as transaction:
        await transaction.commit(write, second.committing([], [], T0), audit(message="m2"))
    after = await store.read("p1", "m2")
    assert after.state is not None
    assert after.state.data == updated


async def test_a_state_past_the_entity_limit_is_refused_by_tables_only(
    store: EndpointState,
) -> None:
    """Table Storage holds 1 MiB an entity, whatever the parts; a PostgreSQL row any text."""
    data = json.dumps({"blob": "y" * (MAX_ENTITY_BYTES // 2)})
    record = await claim(store)

    async def commit() -> None:
        async with store.begin() as transaction:
            await transaction.commit(first_state(data), record.committing([], [], T0), audit())

    if store.rows().kind == "table":
        with pytest.raises(TooLarge, match="Table Storage allows 1 MiB per entity"):
            await commit()
        await _assert_nothing_committed(store, record)
    else:
        await commit()
        snapshot = await store.read("p1", "m1")
        assert snapshot.state is not None
        assert snapshot.state.data == data


async def _assert_nothing_committed(store: EndpointState, record: OutboxRecord) -> None:
    snapshot = await store.read(record.partition_key, record.message_id)
    assert snapshot.outbox == record
    assert [e async for e in store.audit_entities()] == []


async def test_a_stale_state_version_fails_the_whole_commit(store: EndpointState) -> None:
    setup = await claim(store, message="m0")
    async with store.begin() as transaction:
        await transaction.commit(first_state(), setup.committing([], [], T0), audit(message="m0"))
    state = (await store.read("p1", "m0")).state
    assert state is not None
    other = await claim(store, message="m2")
    async with store.begin() as transaction:
        await transaction.commit(
            StateWrite("p1", "Counter", '{"n": 2}', state.version),
            other.committing([], [], T0),
            audit(message="m2"),
        )
    record = await claim(store)

    with pytest.raises(TransactionFailed) as failed:
        async with store.begin() as transaction:
            await transaction.commit(
                StateWrite("p1", "Counter", '{"n": 3}', state.version),
                record.committing([], [], T0),
                audit(),
            )

    assert failed.value.index == 0
    snapshot = await store.read("p1", "m1")
    assert snapshot.outbox == record
    assert snapshot.state is not None
    assert json.loads(snapshot.state.data) == {"n": 2}


async def test_a_state_that_appeared_meanwhile_fails_the_commit(store: EndpointState) -> None:
    setup = await claim(store, message="m0")
    async with store.begin() as transaction:
        await transaction.commit(first_state(), setup.committing([], [], T0), audit(message="m0"))
    record = await claim(store)

    with pytest.raises(TransactionFailed) as failed:
        async with store.begin() as transaction:
            await transaction.commit(first_state(), record.committing([], [], T0), audit())

    assert failed.value.index == 0
    snapshot = await store.read("p1", "m1")
    assert snapshot.outbox == record


async def test_a_changed_outbox_record_fails_the_commit(store: EndpointState) -> None:
    record = await claim(store)
    await store.delete_outbox(record)
    again = await claim(store)  # same key, a new version

    with pytest.raises(TransactionFailed) as failed:
        async with store.begin() as transaction:
            await transaction.commit(first_state(), record.committing([], [], T0), audit())

    assert failed.value.index == 1
    await _assert_nothing_committed(store, again)
    assert (await store.read("p1", "m1")).state is None


async def test_an_existing_audit_row_fails_the_commit(store: EndpointState) -> None:
    setup = await claim(store, partition="p1", message="m1")
    async with store.begin() as transaction:
        await transaction.commit(first_state(partition="p1"), setup.committing([], [], T0), audit())
    await store.delete_outbox((await store.read("p1", "m1")).outbox or setup)
    record = await claim(store)
    state = (await store.read("p1", "m1")).state
    assert state is not None

    with pytest.raises(TransactionFailed) as failed:
        async with store.begin() as transaction:
            await transaction.commit(
                StateWrite("p1", "Counter", '{"n": 9}', state.version),
                record.committing([], [], T0),
                audit(),
            )

    assert failed.value.index == 2
    snapshot = await store.read("p1", "m1")
    assert snapshot.outbox == record
    assert snapshot.state is not None
    assert json.loads(snapshot.state.data) == {"n": 1}


async def test_leaving_a_transaction_without_commit_writes_nothing(store: EndpointState) -> None:
    record = await claim(store)

    with pytest.raises(RuntimeError):
        async with store.begin():
            raise RuntimeError("the handler failed")

    await _assert_nothing_committed(store, record)
    assert (await store.read("p1", "m1")).state is None


async def test_only_one_of_two_concurrent_commits_wins(store: EndpointState) -> None:
    first, second = await claim(store, message="m1"), await claim(store, message="m2")

    async def commit(record: OutboxRecord) -> str:
        async with store.begin() as transaction:
            return await transaction.commit(
                first_state(f'{{"by": "{record.message_id}"}}'),
                record.committing([], [], T0),
                audit(message=record.message_id),
            )

    results = await asyncio.gather(commit(first), commit(second), return_exceptions=True)

    failures = [r for r in results if isinstance(r, TransactionFailed)]
    assert len(failures) == 1, results
    assert len([e async for e in store.audit_entities()]) == 1


async def test_deleting_an_outbox_record_is_guarded_by_its_version(store: EndpointState) -> None:
    record = await claim(store)
    async with store.begin() as transaction:
        committed = replace(
            record.committing([], [], T0),
            etag=await transaction.commit(first_state(), record.committing([], [], T0), audit()),
        )

    with pytest.raises(PreconditionFailed):
        await store.delete_outbox(record)  # the claimed version, since committed
    await store.delete_outbox(committed)
    await store.delete_outbox(committed)  # already gone: nothing to do

    assert (await store.read("p1", "m1")).outbox is None
    assert [r async for r in store.outbox_records()] == []


async def test_hostile_keys_are_data_not_syntax(store: EndpointState) -> None:
    partition = "o'; DROP TABLE bus.state; --☃"
    record = await claim(store, partition=partition, message="m'1")
    async with store.begin() as transaction:
        await transaction.commit(
            first_state(partition=partition),
            record.committing([], [], T0),
            audit(partition=partition, message="m'1"),
        )

    snapshot = await store.read(partition, "m'1")
    assert snapshot.outbox is not None
    assert snapshot.outbox.committed
    assert [s.partition_key async for s in store.states()] == [partition]


async def test_audit_rows_expire_after_their_retention(store: EndpointState) -> None:
    for index, at in enumerate([T0, T0 + timedelta(days=40)]):
        record = await claim(store, partition=f"p{index}", message=f"m{index}")
        async with store.begin() as transaction:
            await transaction.commit(
                first_state(partition=f"p{index}"),
                record.committing([], [], at),
                audit(partition=f"p{index}", message=f"m{index}", at=at),
            )

    removed = await store.expire_audit(T0 + timedelta(days=10))

    assert removed == 1
    assert [e["message_id"] async for e in store.audit_entities()] == ["m1"]


async def test_a_fenced_outbox_record_can_no_longer_be_committed(store: EndpointState) -> None:
    record = await claim(store)

    fenced = await store.fence_outbox(record)

    assert fenced.etag != record.etag
    with pytest.raises(TransactionFailed):
        async with store.begin() as transaction:
            await transaction.commit(first_state(), record.committing([], [], T0), audit())
    with pytest.raises(PreconditionFailed):
        await store.fence_outbox(record)
    await store.delete_outbox(fenced)
    with pytest.raises(NotFound):
        await store.fence_outbox(fenced)


async def test_outbox_records_page_in_key_order(store: EndpointState) -> None:
    for partition, message in [("p2", "m1"), ("p1", "m2"), ("p1", "m1")]:
        await claim(store, partition=partition, message=message)

    seen: list[tuple[str, str]] = []
    continuation: str | None = None
    for _ in range(5):
        page, continuation = await store.outbox_page(continuation, page_size=2)
        seen += [(r.partition_key, r.message_id) for r in page]
        if continuation is None:
            break

    assert seen == [("p1", "m1"), ("p1", "m2"), ("p2", "m1")]


# -- the rows themselves, as every mode writes them ------------------------------------------


def row(partition: str = "p1", key: str = "processed|m1", **properties: TableValue) -> Entity:
    values: dict[str, TableValue] = {"committed_at": T0, "outgoing": "[]", **properties}
    return Entity(partition, key, values)


async def commit(
    rows: EndpointRows, *operations: Insert | Update, message: str = "m1"
) -> list[str]:
    async with rows.begin() as transaction:
        partition = operations[0].entity.partition_key  # one partition, as on Table Storage
        versions = await transaction.commit(list(operations), audit(partition, message))
    return [str(v) for v in versions]


async def test_a_row_is_inserted_once(rows: EndpointRows) -> None:
    version = await rows.insert(row())

    with pytest.raises(AlreadyExists):
        await rows.insert(row(outgoing="[1]"))

    stored = await rows.get("p1", "processed|m1")
    assert stored.etag == version
    assert stored["outgoing"] == "[]"


async def test_absent_rows_read_as_nothing(rows: EndpointRows) -> None:
    assert await rows.read("p1", ["state", "processed|m1"]) == {}
    with pytest.raises(NotFound):
        await rows.get("p1", "state")


async def test_a_commit_writes_rows_and_the_audit_row_together(
    store: EndpointState, rows: EndpointRows
) -> None:
    state = Entity("p1", "state", {"type": "Counter", "data": '{"n": 1}'})
    versions = await commit(rows, Insert(state), Insert(row()))

    found = await rows.read("p1", ["state", "processed|m1", "processed|m2"])

    assert sorted(found) == ["processed|m1", "state"]
    assert [found["state"].etag, found["processed|m1"].etag] == versions
    assert found["processed|m1"]["committed_at"] == T0
    assert [str(e["message_id"]) async for e in store.audit_entities()] == ["m1"]
    assert [(s.partition_key, s.data) async for s in store.states()] == [("p1", '{"n": 1}')]


async def test_property_types_come_back_as_they_went_in(rows: EndpointRows) -> None:
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


async def test_an_existing_row_fails_the_whole_commit(
    store: EndpointState, rows: EndpointRows
) -> None:
    await commit(rows, Insert(row()), message="m0")
    state = Entity("p1", "state", {"type": "Counter", "data": "{}"})

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Insert(state), Insert(row(outgoing="[1]")))

    assert failed.value.index == 1
    assert isinstance(failed.value.cause, AlreadyExists)
    assert await rows.read("p1", ["state"]) == {}  # the state insert was not applied
    assert (await rows.get("p1", "processed|m1"))["outgoing"] == "[]"
    assert [str(e["message_id"]) async for e in store.audit_entities()] == ["m0"]


async def test_a_stale_version_fails_the_whole_commit(rows: EndpointRows) -> None:
    [version] = await commit(rows, Insert(Entity("p1", "state", {"data": "1"})), message="m0")
    await rows.update(Entity("p1", "state", {"data": "2"}), version)

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Update(Entity("p1", "state", {"data": "3"}), version), Insert(row()))

    assert failed.value.index == 0
    assert isinstance(failed.value.cause, PreconditionFailed)
    assert (await rows.get("p1", "state"))["data"] == "2"
    assert await rows.read("p1", ["processed|m1"]) == {}


async def test_an_existing_audit_row_fails_a_rows_commit(rows: EndpointRows) -> None:
    await commit(rows, Insert(row(key="processed|m0")), message="m1")

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Insert(row()), message="m1")

    assert failed.value.index == 1  # after the rows: the audit row
    assert await rows.read("p1", ["processed|m1"]) == {}


async def test_only_one_of_two_concurrent_rows_commits_wins(rows: EndpointRows) -> None:
    async def attempt(n: int) -> str:
        try:
            await commit(rows, Insert(row(outgoing=f"[{n}]")), message=f"m{n}")
        except TransactionFailed:
            return "lost"
        return "won"

    results = await asyncio.gather(attempt(1), attempt(2))

    assert sorted(results) == ["lost", "won"]


async def test_leaving_without_commit_writes_nothing(rows: EndpointRows) -> None:
    async with rows.begin():
        pass
    with pytest.raises(RuntimeError):
        async with rows.begin():
            raise RuntimeError("the handler failed")
    assert await rows.read("p1", ["state"]) == {}


async def test_only_inserts_and_guarded_updates_are_committed(rows: EndpointRows) -> None:
    for operation in (
        Upsert(row()),
        Delete("p1", "processed|m1"),
        Update(row(), etag=None),
    ):
        with pytest.raises(InvalidValue):
            async with rows.begin() as transaction:
                await transaction.commit([operation], audit())
    assert await rows.read("p1", ["processed|m1"]) == {}


async def test_updates_and_deletes_are_guarded_by_the_version(rows: EndpointRows) -> None:
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


async def test_a_version_is_never_handed_out_twice(rows: EndpointRows) -> None:
    [first] = await commit(rows, Insert(row()), message="m1")
    await rows.delete("p1", "processed|m1")
    [second] = await commit(rows, Insert(row()), message="m2")

    with pytest.raises(PreconditionFailed):
        await rows.update(row(outgoing="[9]"), first)
    assert second != first


async def test_pages_follow_key_order_by_prefix_or_exact_key(rows: EndpointRows) -> None:
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


async def test_every_reads_a_selection_across_pages(
    rows: EndpointRows, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows_module, "EVERY_PAGE_SIZE", 2)
    keys = [("p3", "processed|c"), ("p1", "processed|a"), ("p2", "state"), ("p2", "processed|b")]
    for n, (partition, key) in enumerate(keys):
        await commit(rows, Insert(row(partition, key)), message=f"m{n}")

    selected = rows.every(row_key_prefix="processed|")
    processed = [(e.partition_key, e.row_key) async for e in selected]
    everything = [(e.partition_key, e.row_key) async for e in rows.every()]

    assert processed == [("p1", "processed|a"), ("p2", "processed|b"), ("p3", "processed|c")]
    audit = [key for key in everything if key[1].startswith("audit|")]
    assert sorted(set(everything) - set(audit)) == sorted(keys)
    assert len(audit) == len(keys) == len(everything) - len(keys)  # one audit row per commit


async def test_a_partition_pages_alone_in_row_key_order(rows: EndpointRows) -> None:
    keys = [("p2", "state"), ("p1", "processed|b"), ("p10", "state"), ("p1", "state")]
    for n, (partition, key) in enumerate(keys):
        await commit(rows, Insert(row(partition, key)), message=f"m{n}")

    seen: list[tuple[str, str]] = []
    continuation: str | None = None
    while True:
        page, continuation = await rows.page(
            partition_key="p1", page_size=1, continuation=continuation
        )
        seen += [(e.partition_key, e.row_key) for e in page]
        if continuation is None:
            break
    audits, _ = await rows.page(partition_key="p1", row_key_prefix="audit|", page_size=10)

    # Each commit wrote its own audit row in its partition: p1 holds two of them.
    assert [key for partition, key in seen if not key.startswith("audit|")] == [
        "processed|b",
        "state",
    ]
    assert {partition for partition, _ in seen} == {"p1"}
    assert len(audits) == 2


async def test_hostile_row_keys_are_data_not_syntax(rows: EndpointRows) -> None:
    partition = "p'; DROP TABLE bus.mode_rows; --"
    await commit(rows, Insert(row(partition, "processed|%_'")))

    found = await rows.read(partition, ["processed|%_'", "processed|%"])
    page, _ = await rows.page(row_key_prefix="processed|%", page_size=10)

    assert list(found) == ["processed|%_'"]
    assert [e.row_key for e in page] == ["processed|%_'"]
    assert await rows.read("p1", ["processed|%_'"]) == {}


async def test_committed_rows_keep_their_time_in_utc(rows: EndpointRows) -> None:
    local = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    await commit(rows, Insert(row(committed_at=local)))

    stored = (await rows.get("p1", "processed|m1"))["committed_at"]

    assert stored == local
    assert isinstance(stored, datetime)
    assert stored.utcoffset() == timedelta(0)


async def test_rows_are_deleted_together_only_while_unchanged(rows: EndpointRows) -> None:
    keys = ["processed|a", "processed|b", "processed|c", "processed|d"]
    for key in keys:
        await rows.insert(row(key=key))
    read, _ = await rows.page(row_key_prefix="processed|", page_size=10)
    await rows.update(row(key="processed|b", outgoing="[1]"), read[1].etag)

    deleted = await rows.delete_unchanged(read[:3])

    assert [e.row_key for e in deleted] == ["processed|a", "processed|c"]
    left, _ = await rows.page(row_key_prefix="processed|", page_size=10)
    assert [e.row_key for e in left] == ["processed|b", "processed|d"]
    assert [e.row_key for e in await rows.delete_unchanged(left)] == keys[1::2]
    assert (await rows.page(row_key_prefix="processed|", page_size=10))[0] == []
