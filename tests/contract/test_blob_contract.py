"""The blob container contract, run against every backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shared.errors import AlreadyExists, InvalidName, InvalidValue, NotFound, PreconditionFailed
from shared.stores.blob import ANY_ETAG, MAX_BATCH_DELETES, BlobContainer
from tests.conftest import Backend, unique_name


@pytest.fixture
async def container(backend: Backend) -> AsyncIterator[BlobContainer]:
    container = backend.account.blob_container(unique_name("c"))
    await container.create_if_missing()
    yield container
    await container.delete_container()


async def test_create_then_read_returns_content_metadata_and_etag(
    container: BlobContainer,
) -> None:
    etag = await container.create("a/b/c", b"payload", {"Claim": ""})

    blob = await container.read("a/b/c")

    assert blob.data == b"payload"
    assert blob.etag == etag
    assert dict(blob.metadata) == {"claim": ""}
    assert blob.properties.size == 7


@pytest.mark.parametrize("name", ["a b+c", "ü/ñ%20x", "q?x#y&z=1", "~tilde'quote"])
async def test_names_that_need_escaping_address_their_own_blob(
    container: BlobContainer, name: str
) -> None:
    etag = await container.create(name, b"data", {"k": "v"})
    await container.create("decoy", b"other")

    etag = await container.set_metadata(name, {"k": "w"}, etag=etag)
    blob = await container.read(name)

    assert (blob.data, blob.etag, dict(blob.metadata)) == (b"data", etag, {"k": "w"})
    assert [b.name async for b in container.list()] == sorted([name, "decoy"])
    await container.delete(name, etag=etag)
    assert [b.name async for b in container.list()] == ["decoy"]


async def test_create_refuses_an_existing_name_and_keeps_the_first_content(
    container: BlobContainer,
) -> None:
    await container.create("x", b"first")

    with pytest.raises(AlreadyExists):
        await container.create("x", b"second")

    assert (await container.read("x")).data == b"first"


async def test_create_if_missing_is_idempotent(container: BlobContainer) -> None:
    await container.create("x", b"1")
    await container.create_if_missing()
    assert (await container.read("x")).data == b"1"


async def test_missing_container_and_blob_raise_not_found(
    backend: Backend, container: BlobContainer
) -> None:
    with pytest.raises(NotFound):
        await container.read("absent")
    with pytest.raises(NotFound):
        await container.get_properties("absent")
    missing = backend.account.blob_container(unique_name("missing"))
    with pytest.raises(NotFound):
        await missing.create("x", b"")


async def test_set_metadata_is_a_compare_and_swap(container: BlobContainer) -> None:
    """Two claimers read the same ETag: exactly one claim lands."""
    etag = await container.create("token", b"envelope", {"claim": ""})

    new_etag = await container.set_metadata("token", {"claim": "c1"}, etag=etag)
    with pytest.raises(PreconditionFailed):
        await container.set_metadata("token", {"claim": "c2"}, etag=etag)

    blob = await container.read("token")
    assert blob.metadata["claim"] == "c1"
    assert blob.etag == new_etag != etag
    assert blob.data == b"envelope"


async def test_set_metadata_on_a_missing_blob_is_not_found(container: BlobContainer) -> None:
    with pytest.raises(NotFound):
        await container.set_metadata("absent", {"claim": "c"})


async def test_conditional_upload_replaces_only_the_expected_version(
    container: BlobContainer,
) -> None:
    etag = await container.create("topic", b"[]")

    etag2 = await container.upload("topic", b'["a"]', etag=etag)
    with pytest.raises(PreconditionFailed):
        await container.upload("topic", b'["b"]', etag=etag)

    blob = await container.read("topic")
    assert blob.data == b'["a"]'
    assert blob.etag == etag2


async def test_unconditional_upload_creates_or_overwrites(container: BlobContainer) -> None:
    await container.upload("u", b"1", {"k": "v"})
    await container.upload("u", b"2")
    blob = await container.read("u")
    assert blob.data == b"2"
    assert dict(blob.metadata) == {}


async def test_conditional_delete(container: BlobContainer) -> None:
    etag = await container.create("d", b"")
    await container.set_metadata("d", {"claim": "x"}, etag=etag)

    with pytest.raises(PreconditionFailed):
        await container.delete("d", etag=etag)
    await container.delete("d")

    with pytest.raises(NotFound):
        await container.read("d")
    with pytest.raises(NotFound):
        await container.delete("d")


async def test_list_by_prefix_in_name_order_with_metadata(container: BlobContainer) -> None:
    for name in ["s1/m2/a", "s1/m1/b", "s2/m1/c", "s1x"]:
        await container.create(name, name.encode(), {"claim": name[-1]})

    listed = [p async for p in container.list("s1/")]

    assert [p.name for p in listed] == ["s1/m1/b", "s1/m2/a"]
    assert [p.metadata["claim"] for p in listed] == ["b", "a"]
    assert all(p.etag for p in listed)
    assert len([p async for p in container.list()]) == 4


async def test_list_page_resumes_from_its_continuation_until_done(
    container: BlobContainer,
) -> None:
    names = [f"p/{i:02d}" for i in range(7)]
    for name in reversed(names):
        await container.create(name, b"x", {"origin": "o"})
    await container.create("q/outside", b"x")

    seen: list[str] = []
    continuation: str | None = None
    pages = 0
    while True:
        page = await container.list_page("p/", page_size=3, continuation=continuation)
        pages += 1
        assert len(page.items) <= 3
        seen.extend(p.name for p in page.items)
        continuation = page.continuation
        if continuation is None:
            break

    assert seen == names
    assert pages == 3
    assert all(p.metadata == {"origin": "o"} for p in (await container.list_page("p/")).items)


@pytest.mark.parametrize("name", ["", "a//b", "../x", "a/./b", "tab\tname", "back\\slash"])
async def test_invalid_blob_names_are_refused_before_any_request(
    container: BlobContainer, name: str
) -> None:
    with pytest.raises(InvalidName):
        await container.create(name, b"")
    with pytest.raises(InvalidName):
        await container.read(name)


@pytest.mark.parametrize("name", ["ab", "Upper", "a--b", "-ab", "a_b"])
def test_invalid_container_names_are_refused(backend: Backend, name: str) -> None:
    with pytest.raises(InvalidName):
        backend.account.blob_container(name)


async def test_metadata_names_must_be_identifiers(container: BlobContainer) -> None:
    with pytest.raises(InvalidName):
        await container.create("m", b"", {"not-an-identifier": "v"})
    with pytest.raises(NotFound):
        await container.read("m")


async def test_conditional_requests_on_a_missing_blob_fail_the_precondition(
    container: BlobContainer,
) -> None:
    """Azure answers 412, not 404, when an If-Match names a blob that is gone."""
    etag = await container.create("gone", b"")
    await container.delete("gone")

    with pytest.raises(PreconditionFailed):
        await container.upload("gone", b"x", etag=etag)
    with pytest.raises(PreconditionFailed):
        await container.set_metadata("gone", {"claim": "c"}, etag=etag)
    with pytest.raises(PreconditionFailed):
        await container.delete("gone", etag=etag)
    with pytest.raises(NotFound):
        await container.read("gone")


async def test_delete_unchanged_deletes_only_blobs_that_still_have_their_etag(
    container: BlobContainer,
) -> None:
    etags = {name: await container.create(name, b"x") for name in ("a/1", "a/2", "a/3", "b")}
    etags["a/2"] = await container.set_metadata("a/2", {"claim": "c"}, etag=etags["a/2"])
    stale = etags["a/3"]
    await container.set_metadata("a/3", {"claim": "c"})  # changed after we read it
    await container.delete("b")  # gone since we read it

    deleted = await container.delete_unchanged(
        [("a/1", etags["a/1"]), ("a/2", etags["a/2"]), ("a/3", stale), ("b", etags["b"])]
    )

    assert deleted == [True, True, False, False]
    assert [b.name async for b in container.list()] == ["a/3"]
    assert await container.delete_unchanged([]) == []


async def test_delete_unchanged_with_any_etag_deletes_whatever_version_exists(
    container: BlobContainer,
) -> None:
    etag = await container.create("t/1", b"x")
    await container.set_metadata("t/1", {"claim": "c"}, etag=etag)  # a version never read
    await container.create("t/2", b"y")
    kept = await container.create("t/3", b"z")

    deleted = await container.delete_unchanged(
        [("t/1", ANY_ETAG), ("t/gone", ANY_ETAG), ("t/2", ANY_ETAG)]
    )

    assert deleted == [True, False, True]
    assert [b.name async for b in container.list()] == ["t/3"]
    assert (await container.read("t/3")).etag == kept


async def test_delete_unchanged_takes_a_full_batch_in_one_call(container: BlobContainer) -> None:
    names = [f"n/{i:03}" for i in range(MAX_BATCH_DELETES)]
    etags = await asyncio.gather(*(container.create(n, b"") for n in names))

    deleted = await container.delete_unchanged(list(zip(names, etags, strict=True)))

    assert deleted == [True] * MAX_BATCH_DELETES
    assert [b async for b in container.list()] == []


async def test_delete_unchanged_refuses_a_batch_the_service_would_refuse(
    container: BlobContainer,
) -> None:
    etag = await container.create("x", b"")
    with pytest.raises(InvalidValue, match="at most"):
        await container.delete_unchanged([(f"n{i}", etag) for i in range(MAX_BATCH_DELETES + 1)])
    with pytest.raises(InvalidValue, match="only once"):
        await container.delete_unchanged([("x", etag), ("x", etag)])
    with pytest.raises(InvalidName):
        await container.delete_unchanged([("x", etag), ("", etag)])
    smuggled = f"{etag}\r\n\r\nDELETE /other HTTP/1.1"
    for bad in (smuggled, "", "x\ny"):
        with pytest.raises(InvalidValue, match="not an ETag"):
            await container.delete_unchanged([("x", bad)])
    assert [b.name async for b in container.list()] == ["x"]


async def test_delete_unchanged_answers_each_blob_on_its_own_in_a_mixed_batch(
    container: BlobContainer,
) -> None:
    """Deleted, changed since it was read, and gone, side by side in one request: each blob's
    own If-Match decides, and the blobs that stay keep their content."""
    names = [f"m/{i:02}" for i in range(12)]
    created = await asyncio.gather(*(container.create(n, b"x") for n in names))
    etags = dict(zip(names, created, strict=True))
    changed, gone = names[1::3], names[2::3]
    for name in changed:
        await container.set_metadata(name, {"claim": "c"})
    for name in gone:
        await container.delete(name)

    deleted = await container.delete_unchanged([(n, etags[n]) for n in names])

    assert deleted == [n not in changed and n not in gone for n in names]
    assert [b.name async for b in container.list()] == changed
    assert [dict((await container.read(n)).metadata) for n in changed] == [{"claim": "c"}] * 4


@pytest.mark.parametrize("name", ["a b+c", "ü/ñ%20x", "q?x#y&z=1", "~tilde'quote"])
async def test_delete_unchanged_addresses_names_that_need_escaping(
    container: BlobContainer, name: str
) -> None:
    etag = await container.create(name, b"data")
    decoy = await container.create("decoy", b"other")

    assert await container.delete_unchanged([(name, etag), ("decoy", etag)]) == [True, False]

    assert [b.name async for b in container.list()] == ["decoy"]
    assert (await container.read("decoy")).etag == decoy


async def test_delete_unchanged_in_a_missing_container_is_not_found(
    backend: Backend, container: BlobContainer
) -> None:
    etag = await container.create("x", b"")
    missing = backend.account.blob_container(unique_name("missing"))

    with pytest.raises(NotFound):
        await missing.delete_unchanged([("x", etag)])


async def test_read_range_reads_a_slice_of_the_version_it_names(container: BlobContainer) -> None:
    data = bytes(range(256)) * 40
    etag = await container.create("big", data)

    chunks = [await container.read_range("big", i, 1000, etag=etag) for i in range(0, 11000, 1000)]

    assert b"".join(chunks) == data
    assert chunks[10] == data[10000:]  # fewer at its end
    assert await container.read_range("big", len(data), 10, etag=etag) == b""  # none past it
    assert await container.read_range("big", 5, 3, etag=etag) == data[5:8]
    changed = await container.upload("big", b"other", etag=etag)
    with pytest.raises(PreconditionFailed):  # another version: no byte of it
        await container.read_range("big", 0, 1000, etag=etag)
    assert await container.read_range("big", 0, 1000, etag=changed) == b"other"
    with pytest.raises(PreconditionFailed):
        await container.read_range("absent", 0, 10, etag=changed)
    with pytest.raises(InvalidValue):
        await container.read_range("big", -1, 10, etag=changed)
    with pytest.raises(InvalidValue):
        await container.read_range("big", 0, 0, etag=changed)
