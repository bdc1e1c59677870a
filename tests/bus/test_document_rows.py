"""What a document per partition adds to the rows contract (``shared.bus.state.document_rows``):
writers of different rows of one partition both succeed, a write answered as a conflict after
it landed is known as landed, sizes are refused before anything is written (for good, or until
the cleanup has made room), and a document anyone could have written is read as damage."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.bus.records import AuditRecord
from shared.bus.state.damaged import DamagedRow
from shared.bus.state.document_rows import (
    MAX_ATTEMPTS,
    DocumentRows,
    PartitionBusy,
    PartitionFull,
)
from shared.bus.state.stores import endpoint_rows
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StateUnreachable,
    TooLarge,
    TransactionFailed,
)
from shared.stores.blob_documents import BlobDocuments
from shared.stores.documents import DocumentPage, Documents, StoredDocument, document_key
from shared.stores.memory import MemoryStorageAccount
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.table import Entity, Insert, Update

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Interfering(Documents):
    """Documents whose next ``conflicts`` writes are preceded by another writer's change of
    the same document, and whose writes can be made to land and then answer 412, as a
    store's own retry of a write that landed does. It counts the reads and writes asked of
    it (not its own interfering ones)."""

    def __init__(self, inner: Documents) -> None:
        self.inner = inner
        self.name, self.kind, self.max_bytes = inner.name, inner.kind, inner.max_bytes
        self.conflicts = 0
        self.lose_answers = 0
        self.reads = 0
        self.writes = 0

    async def read(self, key: str) -> StoredDocument | None:
        self.reads += 1
        return await self.inner.read(key)

    async def _interfere(self, key: str) -> None:
        if self.conflicts > 0:
            self.conflicts -= 1
            found = await self.inner.read(key)
            if found is not None and found.content is not None:
                await self.inner.replace(key, {**found.content, "touched": True}, found.etag)

    def _answer(self, etag: str) -> str:
        self.writes += 1
        if self.lose_answers > 0:
            self.lose_answers -= 1
            raise PreconditionFailed("the retry of a write that landed")
        return etag

    async def create(self, key: str, content: dict[str, Any]) -> str:
        return self._answer(await self.inner.create(key, content))

    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        await self._interfere(key)
        return self._answer(await self.inner.replace(key, content, etag))

    async def delete(self, key: str, etag: str) -> None:
        await self._interfere(key)
        await self.inner.delete(key, etag)

    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        return await self.inner.page(continuation, page_size)


@pytest.fixture(name="documents", params=["memory-cosmos", "memory-blob"])
async def any_documents(request: pytest.FixtureRequest) -> AsyncIterator[Documents]:
    if request.param == "memory-cosmos":
        yield MemoryDocumentDatabase(max_bytes=8192).endpoint_documents("orders")
    else:
        container = MemoryStorageAccount().blob_container("orders-rows")
        await container.create_if_missing()
        yield BlobDocuments(container, "orders", 8192)


def row(key: str = "processed|a", partition: str = "p1", text: str = "x") -> Entity:
    return Entity(partition, key, {"text": text, "at": T0, "n": 1})


def audit(message: str, partition: str = "p1", at: datetime = T0) -> AuditRecord:
    return AuditRecord(
        partition_key=partition,
        endpoint="orders",
        message_id=message,
        message_type="Pay",
        source="ingress",
        correlation_id="c",
        causation_id=None,
        sent_at=at,
        processed_at=at,
        mode="token",
    )


async def commit(rows: DocumentRows, *operations: Insert | Update, message: str) -> list[str]:
    async with rows.begin() as transaction:
        versions = await transaction.commit(list(operations), audit(message))
    return [v or "" for v in versions]


async def test_writers_of_other_rows_of_a_partition_do_not_fail_each_other(
    documents: Documents,
) -> None:
    rows = DocumentRows(documents)
    keys = [f"processed|{n}" for n in range(8)]

    await asyncio.gather(*(commit(rows, Insert(row(k)), message=k) for k in keys))

    stored = await rows.read("p1", keys)
    assert sorted(stored) == keys


async def test_a_write_retries_when_the_document_changed_under_it(documents: Documents) -> None:
    interfering = Interfering(documents)
    rows = DocumentRows(interfering)
    version = await rows.insert(row())
    interfering.conflicts = 3

    new = await rows.update(row(text="y"), version)

    assert (await rows.get("p1", "processed|a")).etag == new
    assert (await rows.get("p1", "processed|a"))["text"] == "y"


async def test_a_write_gives_up_on_a_document_that_never_stays_still(
    documents: Documents,
) -> None:
    interfering = Interfering(documents)
    rows = DocumentRows(interfering)
    version = await rows.insert(row())
    interfering.conflicts = MAX_ATTEMPTS

    with pytest.raises(PartitionBusy, match="changed under"):
        await rows.update(row(text="y"), version)
    assert (await rows.get("p1", "processed|a")).etag == version


async def test_a_commit_that_landed_but_was_answered_412_is_known_as_landed(
    documents: Documents,
) -> None:
    interfering = Interfering(documents)
    rows = DocumentRows(interfering)
    await rows.insert(row("state"))
    interfering.lose_answers = 1

    [version] = await commit(rows, Insert(row()), message="m1")

    # Had the bus checked again as if nothing landed, its own row would have failed the
    # commit (TransactionFailed: exists) for a commit that in fact succeeded.
    assert (await rows.get("p1", "processed|a")).etag == version
    assert interfering.writes == 2  # the write that landed, and no second one
    audits, _ = await rows.page(row_key_prefix="audit|", page_size=10)
    assert len(audits) == 1


async def test_a_row_condition_fails_the_commit_with_its_index(documents: Documents) -> None:
    rows = DocumentRows(documents)
    version = await rows.insert(row("state"))
    await rows.update(row("state", text="changed"), version)

    with pytest.raises(TransactionFailed) as failed:
        await commit(rows, Insert(row()), Update(row("state"), version), message="m1")

    assert failed.value.index == 1
    assert await rows.read("p1", ["processed|a"]) == {}
    assert (await rows.page(row_key_prefix="audit|", page_size=10))[0] == []


async def test_rows_that_alone_exceed_a_document_are_refused_before_anything_is_written(
    documents: Documents,
) -> None:
    rows = DocumentRows(documents)
    await rows.insert(row("state"))
    before = await documents.read(document_key("p1"))

    with pytest.raises(TooLarge, match="this write's rows take"):
        await commit(rows, Insert(row(text="z" * documents.max_bytes)), message="m1")

    after = await documents.read(document_key("p1"))
    assert before is not None
    assert after is not None
    assert after.etag == before.etag


async def test_a_partition_full_of_residue_refuses_until_rows_are_retired(
    documents: Documents,
) -> None:
    rows = DocumentRows(documents)
    written = 0

    async def one_more() -> None:
        nonlocal written
        await commit(
            rows, Insert(row(f"processed|{written}", text="r" * 500)), message=f"m{written}"
        )
        written += 1

    refusal: PartitionFull | None = None
    for _ in range(100):
        try:
            await one_more()
        except PartitionFull as e:
            refusal = e
            break
    assert refusal is not None, "the partition never filled"
    assert "retried once the cleanup" in str(refusal)
    assert written > 1
    residue, _ = await rows.page(partition_key="p1", page_size=1000)

    # A write that only removes rows is never refused for size; after it, the partition
    # takes the message that was refused.
    deleted = await rows.delete_unchanged(residue[: len(residue) // 2])
    assert deleted
    await commit(rows, Insert(row("processed|last", text="r" * 500)), message="last")
    assert "processed|last" in await rows.read("p1", ["processed|last"])


async def test_the_last_row_gone_takes_its_document_with_it(documents: Documents) -> None:
    rows = DocumentRows(documents)
    version = await rows.insert(row())

    await rows.delete("p1", "processed|a", etag=version)

    assert await documents.read(document_key("p1")) is None
    await rows.delete("p1", "processed|a")  # absent: nothing to do
    with pytest.raises(NotFound):
        await rows.get("p1", "processed|a")


async def test_a_row_is_not_written_over_by_an_insert(documents: Documents) -> None:
    rows = DocumentRows(documents)
    await rows.insert(row(text="first"))

    with pytest.raises(AlreadyExists):
        await rows.insert(row(text="second"))
    with pytest.raises(PreconditionFailed):
        await rows.update(row(text="third"), "not-a-version")
    assert (await rows.get("p1", "processed|a"))["text"] == "first"


FORGED: list[tuple[str, object]] = [
    ("not json", b"{not json"),
    ("a list", []),
    ("no rows", {"pk": "p1"}),
    ("another partition", {"pk": "p2", "rows": {}}),
    ("a row not [version, properties]", {"pk": "p1", "rows": {"state": {"v": 1}}}),
]


async def _forge(documents: Documents, content: object) -> None:
    key = document_key("p1")
    if isinstance(documents, BlobDocuments):
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        await documents.container.upload(key, data)
    elif isinstance(content, dict):
        await documents.create(key, content)
    else:
        pytest.skip("Cosmos DB items are JSON objects: only their fields can be forged")


@pytest.mark.parametrize(("what", "content"), FORGED, ids=[f[0] for f in FORGED])
async def test_a_forged_document_is_damage_not_rows(
    documents: Documents, what: str, content: object
) -> None:
    rows = DocumentRows(documents)
    await rows.insert(row(partition="p0"))
    await rows.insert(row(partition="p2"))
    await _forge(documents, content)

    with pytest.raises(CorruptRecord):
        await rows.read("p1", ["state"])
    with pytest.raises(CorruptRecord):
        await rows.insert(row())  # never written over: it is evidence
    damaged: list[DamagedRow] = []
    page, _ = await rows.page(row_key_prefix="processed|", page_size=10, on_damaged=damaged.append)

    assert [e.partition_key for e in page] == ["p0", "p2"]
    assert [d.key[0] for d in damaged] == [document_key("p1")]


async def test_a_row_with_unreadable_properties_is_damage_its_neighbours_are_read(
    documents: Documents,
) -> None:
    rows = DocumentRows(documents)
    await rows.insert(row("processed|a"))
    await rows.insert(row("processed|c"))
    found = await documents.read(document_key("p1"))
    assert found is not None
    assert found.content is not None
    content = found.content
    content["rows"]["processed|b"] = ["v1", {"n": ["int", "not a number"]}]
    await documents.replace(found.key, content, found.etag)

    damaged: list[DamagedRow] = []
    page, _ = await rows.page(row_key_prefix="processed|", page_size=10, on_damaged=damaged.append)

    assert [e.row_key for e in page] == ["processed|a", "processed|c"]
    assert [d.key for d in damaged] == [("p1", "processed|b")]


async def test_pages_resume_within_a_document_and_across_listing_pages(
    documents: Documents,
) -> None:
    rows = DocumentRows(documents)
    expected = []
    for p in range(5):
        for r in range(3):
            await rows.insert(row(f"processed|{r}", partition=f"p{p}"))
            expected.append((f"p{p}", f"processed|{r}"))
        await rows.insert(row("state", partition=f"p{p}"))

    for size in (1, 2, 4, 7, 100):
        seen: list[tuple[str, str]] = []
        continuation: str | None = None
        while True:
            page, continuation = await rows.page(
                row_key_prefix="processed|", page_size=size, continuation=continuation
            )
            assert len(page) <= size
            seen += [(e.partition_key, e.row_key) for e in page]
            if continuation is None:
                break
        assert seen == expected, size


async def test_expired_audit_rows_go_one_write_per_document(documents: Documents) -> None:
    rows = DocumentRows(documents)
    for n in range(3):
        await commit(rows, Insert(row(f"processed|{n}")), message=f"old{n}")
    await commit(rows, Insert(row("processed|new")), message="new")
    # The audit row of "new" is as old as the others; make it younger.
    found = await rows.page(row_key_prefix="audit|", page_size=10)
    young = [e for e in found[0] if e.row_key.endswith("new")]
    assert len(young) == 1
    props = dict(young[0].properties)
    props["processed_at"] = T0 + timedelta(days=2)
    await rows.update(Entity("p1", young[0].row_key, props), young[0].etag)

    removed = await rows.expire_audit(T0 + timedelta(days=1))

    assert removed == 3
    left, _ = await rows.page(row_key_prefix="audit|", page_size=10)
    assert [e.row_key for e in left] == [young[0].row_key]


async def test_a_remembered_document_never_decides_a_write_alone(documents: Documents) -> None:
    """Two workers' rows of one store: each remembers the documents it last read or wrote, and
    the other's writes make that copy stale. A verdict reached on a stale copy (exists, changed,
    nothing to delete) is reached again from a fresh read; only a write that lands counts."""
    ours, theirs = DocumentRows(documents), DocumentRows(documents)
    version = await ours.insert(row("processed|a"))
    await ours.read("p1", ["processed|a"])

    await theirs.delete("p1", "processed|a", etag=version)  # ours still remembers the row
    again = await ours.insert(row("processed|a", text="again"))  # not AlreadyExists
    await theirs.insert(row("processed|b"))  # ours does not remember it
    await ours.delete("p1", "processed|b")  # not "nothing to delete"
    newer = await theirs.update(row("processed|a", text="theirs"), again)

    with pytest.raises(PreconditionFailed):
        await ours.update(row("processed|a", text="ours"), again)  # really changed
    assert await ours.read("p1", ["processed|b"]) == {}
    assert (await ours.get("p1", "processed|a")).etag == newer


async def test_a_message_reads_its_partition_once(documents: Documents) -> None:
    """The rows' reads and writes of one message: R2's read, O(m)'s insert and the commit
    make one read and two writes of the document, not a read before each write."""
    counting = Interfering(documents)
    rows = DocumentRows(counting)
    await rows.read("p1", ["state", "outbox|m1"])
    await rows.insert(row("processed|m1"))
    await commit(rows, Insert(row("state")), message="m1")

    assert (counting.reads, counting.writes) == (1, 2)


class Unanswering(Interfering):
    """Documents that never answer, as a store that is down."""

    async def read(self, key: str) -> StoredDocument | None:
        raise OutcomeUnknown("no answer")


class UnansweringDatabase:
    def __init__(self, inner: MemoryDocumentDatabase) -> None:
        self.inner = inner

    def endpoint_documents(self, endpoint: str) -> Documents:
        return Unanswering(self.inner.endpoint_documents(endpoint))

    async def close(self) -> None:
        pass


async def test_a_document_store_that_does_not_answer_is_the_state_store_down() -> None:
    """As for a table endpoint: the failure table lets the message wait for its store."""
    account = MemoryStorageAccount()
    cosmos = endpoint_rows(
        "orders", "cosmos", account, None, UnansweringDatabase(MemoryDocumentDatabase())
    )

    with pytest.raises(StateUnreachable, match="the state store did not answer"):
        await cosmos.read("p1", ["state"])


async def test_rows_deleted_from_a_listed_page_need_no_read_first(documents: Documents) -> None:
    """The cleanup lists documents, then deletes rows of them: the listed copy starts the
    delete, as a read one would."""
    counting = Interfering(documents)
    rows = DocumentRows(counting)
    for partition in ("p1", "p2"):
        await rows.insert(row(partition=partition))
    cleanup = DocumentRows(counting)
    counting.reads = 0

    page, _ = await cleanup.page(row_key_prefix="processed|", page_size=10)
    deleted = [await cleanup.delete_unchanged([entity]) for entity in page]

    assert [len(d) for d in deleted] == [1, 1]
    assert counting.reads == 0
