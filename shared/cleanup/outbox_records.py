"""The outbox task: a committed O(m) is retired once every token it committed is gone or
claimed and no abandoned one is left under its prefix, its incoming token deleted first (R7,
which the receiver leaves to the cleanup); an uncommitted one only once its incoming token is
gone.

A committed O(m) that lists no outputs and no abandoned tokens (a handler that sent nothing,
in a round that left nothing it knows of) is retired without listing its prefix: it has no
output to wait for, and a token some other round of it left there unrecorded was never
committed, which the tokens task (``shared.cleanup.abandoned_tokens``) proves by this very
O(m)'s absence and deletes after the grace period. That saves a List Blobs, the dearest
request the cleanup makes, for every such message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.bus.envelope import token_prefix
from shared.bus.records import OUTBOX_PREFIX, OutboxRecord
from shared.cleanup.base import (
    UNJUDGED,
    CleanupContext,
    CleanupTask,
    add_count,
    clear_prefix,
    remove_rows,
    row_name,
    skip_unjudged,
    skipping,
    storage_error,
)
from shared.cleanup.batching import (
    STORAGE_ERRORS,
    delete_batched,
)
from shared.cleanup.report import TaskReport
from shared.concurrency import each
from shared.errors import (
    CorruptRecord,
    NotFound,
)
from shared.stores.blob import ANY_ETAG, BlobContainer
from shared.stores.table import Entity


async def _exists(tokens: BlobContainer, name: str) -> bool:
    try:
        await tokens.get_properties(name)
    except NotFound:
        return False
    return True


class OutboxRecords(CleanupTask):
    """Retire O(m) of one endpoint once its message and everything it sent are consumed,
    deleting its incoming token first: R7, which token mode's receiver leaves to the cleanup
    (``shared.bus.receiver``).

    The order is R7's and R8's: a copy that finds O(m) gone must find token(a) gone too (a
    duplicate), never token(a) claimed by a claim id no O(m) holds any more. The incoming
    tokens of a page's retired records go together, ``DELETES_PER_BATCH`` to a request and
    without reading them first (``ANY_ETAG``: once O(m) is committed no version of token(a)
    is needed); a record whose token could not be deleted stays for the next pass."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"outbox.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        rows = context.rows(self.endpoint)
        page, following = await rows.page(
            row_key_prefix=OUTBOX_PREFIX,
            page_size=context.settings.page_size,
            continuation=continuation,
            on_damaged=skipping(report),
        )

        async def judge(entity: Entity) -> _Retired | None:
            try:
                record = OutboxRecord.from_entity(entity)
                kind = await self._judge(context, record, report)
            except UNJUDGED as e:
                skip_unjudged(report, row_name(rows, entity), e)
            except STORAGE_ERRORS as e:
                storage_error(report, row_name(rows, entity), e)
            else:
                return None if kind is None else _Retired(entity, kind, record)
            return None

        verdicts = await each(context.limit, page, judge)
        retired = await _without_incoming([v for v in verdicts if v is not None], context, report)
        await remove_rows(context, rows, [(r.entity, r.kind) for r in retired], report)
        return following

    async def _judge(
        self, context: CleanupContext, record: OutboxRecord, report: TaskReport
    ) -> str | None:
        """The kind the record is removed as, or None when it stays (counted in
        ``report.kept``). A committed one still has its incoming token to delete then
        (``_without_incoming``)."""
        if not record.committed:
            # A claim nobody committed. While the incoming token exists the message is still
            # to be processed (maybe parked in the poison queue): keep the claim.
            if not context.is_old(record.started_at):
                report.kept["young"] += 1
            elif await _exists(context.tokens, record.incoming_token):
                report.kept["incoming_pending"] += 1
            else:
                return "unused_outbox_records"
            return None
        if record.committed_at is None:
            raise CorruptRecord("committed outbox record without committed_at")
        if not context.is_old(record.committed_at):
            report.kept["young"] += 1
            return None
        if _knows_no_tokens(record):
            return "outbox_records"
        committed = {o.token for o in record.outgoing}
        prefix = token_prefix(self.endpoint, record.message_id)
        if await clear_prefix(context, prefix, committed, report):
            report.kept["outputs_in_flight"] += 1
            return None
        return "outbox_records"


def _knows_no_tokens(record: OutboxRecord) -> bool:
    """Whether a committed O(m) may go without listing its prefix: it committed no token, so
    none of its outputs can still be in flight, and it records none abandoned (those it knows
    of are cleared here, in the same pass, as before). Any token under its prefix is then one
    no round committed, since the committing round's are in ``outgoing``: the tokens task
    deletes it once O(m) is gone, whose absence proves that (``shared.cleanup.origins``)."""
    return not record.outgoing and not record.abandoned


@dataclass(frozen=True)
class _Retired:
    """An O(m) judged removable, as the kind it is counted as."""

    entity: Entity
    kind: str
    record: OutboxRecord


async def _without_incoming(
    retired: Sequence[_Retired], context: CleanupContext, report: TaskReport
) -> list[_Retired]:
    """R7 for the committed records judged removable: delete their incoming tokens, in
    batches; return the records that may go now (the uncommitted ones, whose token was
    already gone, and the committed ones whose token is gone now)."""
    names = sorted({r.record.incoming_token for r in retired if r.record.committed})
    gone, deleted = await delete_batched(context.tokens, [(n, ANY_ETAG) for n in names])
    add_count(report.removed, "incoming_tokens", deleted)

    def waiting(r: _Retired) -> bool:
        return r.record.committed and r.record.incoming_token not in gone

    add_count(report.kept, "storage_error", sum(map(waiting, retired)))
    return [r for r in retired if not waiting(r)]
