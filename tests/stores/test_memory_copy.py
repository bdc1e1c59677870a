"""MemoryStorageAccount.copy: another account with the same contents, independent from then on
(the simulator sets an account up once per configuration and runs each schedule on a copy)."""

from __future__ import annotations

import pytest

from shared.clock import ManualClock
from shared.errors import AlreadyExists, NotFound, PreconditionFailed
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity


async def _filled() -> tuple[MemoryStorageAccount, ManualClock]:
    clock = ManualClock()
    account = MemoryStorageAccount(clock=clock)
    container = account.blob_container("tokens")
    await container.create_if_missing()
    await container.create("a/1", b"one", {"claim": "c1"})
    await container.create("a/2", b"two")
    table = account.table("rows")
    await table.create_if_missing()
    await table.insert(Entity("p", "r1", {"n": 1}))
    queue = account.queue("work")
    await queue.create_if_missing()
    await queue.send("first")
    await queue.send("second")
    return account, clock


async def test_a_copy_holds_what_the_account_held() -> None:
    account, _ = await _filled()
    copy = account.copy(ManualClock())
    original_blob = await account.blob_container("tokens").read("a/1")
    copied_blob = await copy.blob_container("tokens").read("a/1")
    assert copied_blob == original_blob
    assert [p.name async for p in copy.blob_container("tokens").list("a/")] == ["a/1", "a/2"]
    assert await copy.table("rows").get("p", "r1") == await account.table("rows").get("p", "r1")
    assert [m.content for m in await copy.queue("work").peek(32)] == ["first", "second"]


async def test_changes_to_a_copy_are_not_seen_by_the_original_nor_the_reverse() -> None:
    account, _ = await _filled()
    copy = account.copy(ManualClock())
    await copy.blob_container("tokens").delete("a/1")
    await copy.blob_container("tokens").create("a/3", b"three")
    await account.blob_container("tokens").create("a/4", b"four")
    assert [p.name async for p in account.blob_container("tokens").list("a/")] == [
        "a/1",
        "a/2",
        "a/4",
    ]
    assert [p.name async for p in copy.blob_container("tokens").list("a/")] == ["a/2", "a/3"]

    await copy.table("rows").update(Entity("p", "r1", {"n": 2}))
    await account.table("rows").insert(Entity("p", "r2", {"n": 3}))
    assert (await account.table("rows").get("p", "r1"))["n"] == 1
    with pytest.raises(NotFound):
        await copy.table("rows").get("p", "r2")

    [received] = await copy.queue("work").receive(1)
    await copy.queue("work").delete(received.id, received.pop_receipt)
    assert await copy.queue("work").approximate_count() == 1
    assert [m.content for m in await account.queue("work").peek(32)] == ["first", "second"]

    await copy.blob_container("fresh").create_if_missing()
    with pytest.raises(NotFound):
        await account.blob_container("fresh").create("x", b"")


async def test_a_copy_keeps_the_rules_and_the_conditions_of_what_it_copied() -> None:
    account, clock = await _filled()
    [leased] = await account.queue("work").receive(1, visibility_timeout=60)
    etag = (await account.blob_container("tokens").read("a/1")).properties.etag
    copy_clock = ManualClock(clock())
    copy = account.copy(copy_clock)

    # The lease taken before the copy holds in the copy too, on the copy's clock.
    assert [m.content for m in await copy.queue("work").peek(32)] == ["second"]
    copy_clock.advance(61)
    assert [m.content for m in await copy.queue("work").peek(32)] == ["first", "second"]
    assert [m.content for m in await account.queue("work").peek(32)] == ["second"]
    await copy.queue("work").delete(leased.id, leased.pop_receipt)

    # ETag conditions and uniqueness hold as they did; new ETags differ from every old one.
    with pytest.raises(AlreadyExists):
        await copy.blob_container("tokens").create("a/1", b"again")
    new_etag = await copy.blob_container("tokens").upload("a/1", b"changed", etag=etag)
    assert new_etag != etag
    with pytest.raises(PreconditionFailed):
        await copy.blob_container("tokens").upload("a/1", b"stale", etag=etag)
    await account.blob_container("tokens").upload("a/1", b"original changed", etag=etag)
    with pytest.raises(AlreadyExists):
        await copy.table("rows").insert(Entity("p", "r1", {}))


async def test_etags_go_on_from_the_same_number_in_an_account_and_its_copy() -> None:
    """A run on a copy names its ETags as a run on the account it copied would."""
    account, _ = await _filled()
    copy = account.copy(ManualClock())
    etags = {await a.table("rows").upsert(Entity("p", "r9", {})) for a in (account, copy)}
    assert len(etags) == 1
    assert etags != {(await account.table("rows").get("p", "r1")).etag}
