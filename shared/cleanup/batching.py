"""Fewer, concurrent requests for the cleanup's many small decisions.

Each record's decision is independent and each deletion is ETag-guarded, so a page's records
are judged concurrently (at most ``limit`` at once) and what they condemn is deleted in
batches: tokens through the blob store's batch delete, rows of one partition together
(``EndpointRows.delete_unchanged``: a table transaction on Table Storage). Origin rows are
read once per origin, and several rows of one partition in one query, in whichever store
keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from shared.bus.origin import Origin
from shared.bus.state.damaged import DamagedRow, OnDamaged
from shared.bus.state.rows import EndpointRows
from shared.concurrency import each
from shared.errors import InvalidName, OutcomeUnknown, StorageError
from shared.stores.blob import BlobContainer, BlobProperties
from shared.stores.names import MAX_TRANSACTION_OPERATIONS
from shared.stores.table import Entity

T = TypeVar("T")

log = logging.getLogger(__name__)

STORAGE_ERRORS = (StorageError, OutcomeUnknown)
"""What a request for one record may fail with. The record is left for the next pass, which
judges it again from scratch: every decision stands on its own, so nothing is lost by it, and
one slow or failed request does not end the page for the others."""

DELETES_PER_BATCH = 64
"""Token deletes per Blob Batch request (the service takes up to 256, ``MAX_BATCH_DELETES``). The
batch answers when its last delete is done, within one call's deadline: on a busy Azurite,
where each delete costs the emulator time that grows with the container (about 10 ms at 5,000
blobs), a batch of 200 ran past the 8 s deadline. 64 still saves 63 requests in 64."""

ROW_KEYS_PER_QUERY = 14
"""Table Storage allows 15 comparisons in one filter: the PartitionKey and 14 RowKeys."""


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def delete_blobs(tokens: BlobContainer, blobs: Sequence[BlobProperties]) -> int:
    """Delete the blobs that still have the ETag they were listed with, ``DELETES_PER_BATCH``
    per request; return how many went. A blob consumed or changed since it was listed is not
    ours to delete any more. Never takes the limit: it runs inside work that holds it."""
    _, deleted = await delete_batched(tokens, [(blob.name, blob.etag) for blob in blobs])
    return deleted


async def delete_batched(
    tokens: BlobContainer, pairs: Sequence[tuple[str, str]]
) -> tuple[set[str], int]:
    """``delete_unchanged`` over ``(name, etag)`` pairs, ``DELETES_PER_BATCH`` per request;
    return the names whose request was answered (each deleted, or gone or changed since) and
    how many were deleted. A batch that fails is left for the next pass, and logged."""
    answered: set[str] = set()
    deleted = 0
    for batch in chunks(pairs, DELETES_PER_BATCH):
        try:
            deleted += sum(await tokens.delete_unchanged(batch))
        except STORAGE_ERRORS as e:
            log.warning("cleanup: %d token deletes left for the next pass: %s", len(batch), e)
            continue
        answered.update(name for name, _ in batch)
    return answered, deleted


async def delete_rows(
    limit: asyncio.Semaphore, rows: EndpointRows, condemned: Sequence[Entity]
) -> list[Entity]:
    """Delete the rows that still have the version they were read with, up to 100 of one
    partition at a time (one transaction on Table Storage: ``EndpointRows.delete_unchanged``);
    return the rows deleted. A row that changed or could not be deleted stays."""
    groups: dict[str, list[Entity]] = {}
    for row in condemned:
        groups.setdefault(row.partition_key, []).append(row)
    batches = [
        batch for group in groups.values() for batch in chunks(group, MAX_TRANSACTION_OPERATIONS)
    ]
    done = await each(limit, batches, rows.delete_unchanged)
    return [row for batch in done for row in batch]


async def read_rows(
    limit: asyncio.Semaphore,
    rows_of: Callable[[str], EndpointRows],
    origins: Iterable[Origin],
) -> dict[Origin, Entity | DamagedRow | None]:
    """The row each origin names (None when absent), with one query for up to 14 rows of one
    partition, in the rows ``rows_of`` gives for the origin's table (whichever store keeps
    them). An origin whose row could not be read is left out; a row whose stored properties
    cannot be read is given as a DamagedRow, never as absent (absent says its tokens were
    never committed)."""
    groups: dict[tuple[str, str], set[str]] = {}
    for origin in origins:
        groups.setdefault((origin.table, origin.partition_key), set()).add(origin.row_key)
    # In key order, not the callers' (often a set's, which follows string hashing): the same
    # page reads its origins in the same order in every process, so a simulation replays.
    reads = [
        (table, partition, keys)
        for (table, partition), row_keys in sorted(groups.items())
        for keys in chunks(sorted(row_keys), ROW_KEYS_PER_QUERY)
    ]

    async def read(
        what: tuple[str, str, Sequence[str]],
    ) -> list[tuple[Origin, Entity | DamagedRow | None]]:
        table_name, partition, keys = what
        damaged: dict[str, DamagedRow] = {}

        def note(row: DamagedRow) -> None:
            damaged[row.key[1]] = row

        try:
            found = await _read_partition(rows_of(table_name), partition, keys, note)
        except STORAGE_ERRORS as e:
            log.warning("cleanup: origin rows in %s/%s unread: %s", table_name, partition, e)
            return []  # their tokens wait for the next pass
        return [
            (Origin(table_name, partition, key), damaged.get(key) or found.get(key)) for key in keys
        ]

    done = await each(limit, reads, read)
    return {origin: row for batch in done for origin, row in batch}


async def _read_partition(
    rows: EndpointRows, partition: str, keys: Sequence[str], on_damaged: OnDamaged
) -> dict[str, Entity]:
    try:
        return await rows.read(partition, keys, on_damaged)
    except InvalidName:
        pass  # a key the store refuses (a token's origin may name any): each on its own
    found: dict[str, Entity] = {}
    for key in keys:
        with contextlib.suppress(InvalidName):
            found |= await rows.read(partition, [key], on_damaged)
    return found
