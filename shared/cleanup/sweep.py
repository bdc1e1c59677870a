"""The outbox sweep: retire outbox records and delete abandoned tokens.

For each outbox record O(m) of an endpoint:
- committed, and older than the grace period: every token under the sender-scoped prefix
  ``{endpoint}/{m}/`` that O(m) did not commit was created by a round that lost or crashed
  and is never signalled; once it is older than the grace period too, it is deleted. Then,
  if the incoming token is gone (the message is fully processed) and nothing abandoned is
  left, O(m) is deleted.
- not committed, and its incoming token gone: a copy that arrived after the message was
  finished created it; it claims nothing and is deleted.
A committed token is never deleted here: it was signalled, and its receiver deletes it.

The grace period must exceed the function timeout plus the network's maximum segment
lifetime: a losing copy may still be creating tokens for up to a function timeout after the
winner committed, and a create whose outcome was unknown may land that late.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import timedelta

from shared.bus.envelope import token_prefix
from shared.bus.records import OUTBOX_PREFIX, OutboxRecord, outbox_row
from shared.clock import Clock, system_clock, to_datetime
from shared.errors import NotFound, PreconditionFailed
from shared.stores.account import StorageAccount

DEFAULT_GRACE_SECONDS = 600.0


@dataclass
class SweepReport:
    outbox_records_removed: int = 0
    abandoned_tokens_removed: int = 0
    outbox_records_kept: int = 0
    details: list[str] = field(default_factory=list)


async def sweep_endpoint(
    account: StorageAccount,
    endpoint: str,
    *,
    tokens_container: str = "tokens",
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    clock: Clock = system_clock,
) -> SweepReport:
    report = SweepReport()
    table = account.table(endpoint)
    tokens = account.blob_container(tokens_container)
    now = to_datetime(clock())
    grace = timedelta(seconds=grace_seconds)

    async def incoming_gone(record: OutboxRecord) -> bool:
        try:
            await tokens.get_properties(record.incoming_token)
        except NotFound:
            return True
        return False

    async for entity in table.query_all(row_key_prefix=OUTBOX_PREFIX):
        record = OutboxRecord.from_entity(entity)
        if not record.committed:
            if record.started_at + grace <= now and await incoming_gone(record):
                await _delete_record(account, endpoint, record, report)
            else:
                report.outbox_records_kept += 1
            continue
        assert record.committed_at is not None
        if record.committed_at + grace > now:
            report.outbox_records_kept += 1
            continue
        committed = {o.token for o in record.outgoing}
        leftovers = 0
        async for blob in tokens.list(token_prefix(endpoint, record.message_id)):
            if blob.name in committed:
                continue
            if blob.last_modified + grace > now:
                leftovers += 1
                continue
            with contextlib.suppress(NotFound, PreconditionFailed):
                await tokens.delete(blob.name, etag=blob.etag)
                report.abandoned_tokens_removed += 1
                report.details.append(f"abandoned token {blob.name}")
        if leftovers == 0 and await incoming_gone(record):
            await _delete_record(account, endpoint, record, report)
        else:
            report.outbox_records_kept += 1
    return report


async def _delete_record(
    account: StorageAccount, endpoint: str, record: OutboxRecord, report: SweepReport
) -> None:
    try:
        await account.table(endpoint).delete(
            record.partition_key, outbox_row(record.message_id), etag=record.etag
        )
    except PreconditionFailed:
        report.outbox_records_kept += 1  # changed since we read it: look again next pass
        return
    report.outbox_records_removed += 1
