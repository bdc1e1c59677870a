"""Token mode with R7 moved to the cleanup (issue 33, the reduction after claim-by-delete
failed): a protocol the simulator explores beside production's, never production code.

The receiver claims token(a) by its metadata as production does (R4) but does not delete it
after the signals: its invocation ends at R6. The cleanup, which already retires O(m) once
the message and everything it sent are consumed, deletes token(a) first: when O(m) is
committed, past the grace period and each token it committed is gone or claimed (consumed
or received, so signalled; with no outputs there was nothing to signal), the signals were
sent, which is all R7 waited for (design notes section 3: signals before the incoming token
is deleted). A claimed output counts as consumed because its token now stays until its
receiver's cleanup pass: waiting for it would keep the sender's O(m) one more pass per hop.
In production those deletes would go in the cleanup's blob batches
(``shared.cleanup.batching.delete_blobs``): one request per 256 tokens instead of one per
message on the hot path.

Nothing else changes: a copy that comes while the token is still there finds it claimed by
O(m)'s claim id and O(m) committed, and resumes (it sends the signals again: harmless); one
that comes after the cleanup is the copy that comes after R7 today. docs/claim-by-delete.md
has the runs.

Modelled as production's receiver over a blob container that does not send R7 (the delete
of the token the current invocation received, ``lab.sim.variants.incoming_token``; the only
delete of it the receiver makes) and the cleanup's O(m) task with the delete added.
"""

from __future__ import annotations

import contextlib

from lab.sim.variants import incoming_token
from shared.bus.envelope import token_prefix
from shared.bus.records import OutboxRecord
from shared.cleanup.batching import delete_blobs
from shared.cleanup.report import TaskReport
from shared.cleanup.tasks import CleanupContext, OutboxRecords
from shared.errors import CorruptRecord, NotFound
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer, BlobProperties
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer


class _IncomingKept(DelegatingBlobContainer):
    async def delete(self, name: str, *, etag: str | None = None) -> None:
        if incoming_token.get() == (self.name, name):
            return  # R7 is the cleanup's
        await super().delete(name, etag=etag)


class IncomingKeptAccount(DelegatingAccount):
    """The receivers' account: R7 is never sent (the cleanup's own passes run outside any
    invocation, where no incoming token is set, so their deletes go through)."""

    def blob_container(self, name: str) -> BlobContainer:
        return _IncomingKept(self.inner.blob_container(name))


def keeping_incoming(account: StorageAccount) -> StorageAccount:
    return IncomingKeptAccount(account)


class IncomingDeletingOutboxRecords(OutboxRecords):
    """The cleanup's O(m) task that also does R7. A committed O(m) past the grace period is
    retired once each token it committed is gone *or claimed* (a claimed output was signalled
    and is now its receiver's, whose own cleanup deletes it: waiting for that would keep O(m)
    one more pass per hop of a chain), after its own token(a) is deleted here. An uncommitted
    O(m) is judged as production judges it."""

    async def _judge(
        self, context: CleanupContext, record: OutboxRecord, report: TaskReport
    ) -> str | None:
        if not record.committed:
            return await super()._judge(context, record, report)
        if record.committed_at is None:
            raise CorruptRecord("committed outbox record without committed_at")
        if not context.is_old(record.committed_at):
            report.kept["young"] += 1
            return None
        if await self._unclaimed_outputs(context, record, report):
            report.kept["outputs_in_flight"] += 1
            return None
        with contextlib.suppress(NotFound):
            await context.tokens.delete(record.incoming_token)  # R7
        return "outbox_records"

    async def _unclaimed_outputs(
        self, context: CleanupContext, record: OutboxRecord, report: TaskReport
    ) -> int:
        """How many of O(m)'s tokens must still wait: committed and not claimed yet, or not
        committed and still young. The others not committed are abandoned: deleted (as
        production's ``_clear_prefix`` does)."""
        committed = {o.token for o in record.outgoing}
        waiting = 0
        doomed: list[BlobProperties] = []
        async for blob in context.tokens.list(token_prefix(self.endpoint, record.message_id)):
            if blob.name in committed:
                waiting += not blob.metadata.get("claim")
            elif not context.is_old(blob.last_modified) or blob.metadata.get("claim"):
                waiting += 1
            else:
                doomed.append(blob)
        report.removed["abandoned_tokens"] += await delete_blobs(context.tokens, doomed)
        return waiting


class IncomingDeletedEarly(IncomingDeletingOutboxRecords):
    """Known-bad: the cleanup's R7 does not wait for O(m)'s outputs to be claimed, so a
    round that committed and crashed before its signals loses them (the rule that signals go
    before the incoming token, moved to the cleanup)."""

    async def _unclaimed_outputs(
        self, context: CleanupContext, record: OutboxRecord, report: TaskReport
    ) -> int:
        return 0
