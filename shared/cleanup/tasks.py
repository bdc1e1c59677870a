"""The cleanup's tasks: each pages through one kind of record and removes what is evicted.

Every decision here is safe on its own, whatever else runs concurrently (receivers, other
cleanup instances): deletions are ETag-guarded or idempotent, and nothing that was or will be
signalled is deleted (design notes section 3):
- a token is deleted only when it is older than the grace period, unclaimed, and its origin
  row does not list it as committed (``shared.cleanup.origins``);
- O(m) is retired only when its incoming token is gone and every token under its prefix is
  gone (so the tokens it committed were consumed, and no abandoned one is left for later);
- an ingress record is removed only after its window, and only once its tokens are gone;
- audit rows are removed after their retention period.
"""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.bus.config import BusConfig
from shared.bus.envelope import TOKEN_NAME, token_prefix
from shared.bus.ingress import INGRESS_ROW
from shared.bus.modes.entity_outbox import expire_entity_outboxes
from shared.bus.modes.processed_table import expire_processed
from shared.bus.modes.state_based import truncate_state_streams
from shared.bus.origin import Origin
from shared.bus.outgoing import ORIGIN_METADATA
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, OutboxRecord, OutgoingSignal
from shared.cleanup.origins import kind_of
from shared.cleanup.report import TaskReport, describe
from shared.cleanup.settings import CleanupSettings
from shared.errors import CorruptRecord, InvalidName, InvalidValue, NotFound, PreconditionFailed
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer, BlobProperties
from shared.stores.table import Entity, Table

log = logging.getLogger(__name__)

ROW_ERRORS = (ValueError, KeyError, TypeError, CorruptRecord, RecursionError)
"""What a malformed record raises when it is read or its names are used (InvalidName and
InvalidValue are ValueErrors). Storage errors are not among them: they end the page, and the
next run resumes from the checkpoint."""


def _skip_bad_row(report: TaskReport, what: str, error: BaseException) -> None:
    """Report a record that cannot be judged and pass over it: one bad row must not keep
    every later one from being cleaned, nor end the run."""
    log.warning("cleanup %s: skipping bad record %s: %s", report.task, what, describe(error))
    report.bad_row(what, error)


def _row(table: Table, entity: Entity) -> str:
    return f"{table.name} {entity.partition_key!r}/{entity.row_key!r}"


@dataclass(frozen=True)
class CleanupContext:
    account: StorageAccount
    config: BusConfig
    settings: CleanupSettings
    endpoints: tuple[str, ...]
    now: datetime

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.grace_seconds)

    @property
    def tokens(self) -> BlobContainer:
        return self.account.blob_container(self.config.tokens_container)

    def is_old(self, moment: datetime) -> bool:
        """True once ``moment`` is at least one grace period in the past."""
        return moment + self.grace <= self.now


class CleanupTask(abc.ABC):
    id: str

    @abc.abstractmethod
    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        """Process one page starting at ``continuation``; return where the next page starts,
        or None when the pass is complete."""


async def _exists(tokens: BlobContainer, name: str) -> bool:
    try:
        await tokens.get_properties(name)
    except NotFound:
        return False
    return True


async def _delete_blob(tokens: BlobContainer, name: str, etag: str) -> bool:
    try:
        await tokens.delete(name, etag=etag)
    except (NotFound, PreconditionFailed):
        return False  # consumed or changed since listed: not ours to delete any more
    return True


async def _delete_row(table: Table, entity: Entity) -> bool:
    try:
        await table.delete(entity.partition_key, entity.row_key, etag=entity.etag)
    except PreconditionFailed:
        return False  # changed since we read it: look again next pass
    return True


async def _clear_prefix(
    context: CleanupContext, prefix: str, committed: Collection[str], report: TaskReport
) -> int:
    """Delete the abandoned tokens under a sender-scoped prefix; return how many tokens must
    still wait there (committed ones not yet consumed, or abandoned ones still young)."""
    waiting = 0
    tokens = context.tokens
    async for blob in tokens.list(prefix):
        if blob.name in committed or not context.is_old(blob.last_modified):
            waiting += 1
        elif blob.metadata.get("claim"):
            waiting += 1  # claimed means signalled: never ours, whatever the record says
        elif await _delete_blob(tokens, blob.name, blob.etag):
            report.removed["abandoned_tokens"] += 1
    return waiting


class AbandonedTokens(CleanupTask):
    """Every token in the container (or under one sender's prefix), judged by its origin
    row (``shared.cleanup.origins``)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.id = f"tokens.{prefix.rstrip('/')}" if prefix else "tokens"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        tokens = context.tokens
        page = await tokens.list_page(
            self.prefix, page_size=context.settings.page_size, continuation=continuation
        )
        rows: dict[Origin, Entity | None] = {}
        for blob in page.items:
            if not context.is_old(blob.last_modified):
                report.kept["young"] += 1
                continue
            try:
                verdict = await self._judge(context, blob, rows)
            except ROW_ERRORS as e:
                _skip_bad_row(report, f"token {blob.name!r}", e)
                continue
            if verdict != "abandoned":
                report.kept[verdict] += 1
            elif await _delete_blob(tokens, blob.name, blob.etag):
                report.removed["abandoned_tokens"] += 1
        return page.continuation

    async def _judge(
        self, context: CleanupContext, blob: BlobProperties, rows: dict[Origin, Entity | None]
    ) -> str:
        """'abandoned', or why the token stays."""
        raw = blob.metadata.get(ORIGIN_METADATA)
        if not raw:
            return "no_origin"  # from before origins were recorded: the outbox task's job
        name = TOKEN_NAME.fullmatch(blob.name)
        try:
            origin: Origin | None = Origin.decode(raw)
        except InvalidValue:
            origin = None
        kind = None if origin is None else kind_of(origin.row_key)
        known_tables = {*context.endpoints, context.config.ingress_table}
        if name is None or origin is None or kind is None or origin.table not in known_tables:
            # Never let a token's metadata point the cleanup at an arbitrary table.
            log.warning("token %s has an origin outside this bus: %r", blob.name, raw)
            return "bad_origin"
        if origin not in rows:
            rows[origin] = await _get_row(context.account.table(origin.table), origin)
        row = rows[origin]
        committed = None if row is None else kind.committed_attempts(row, name["incoming"])
        if committed is None:
            # The row says nothing about this message. That proves the token was never
            # committed unless rows of this kind expire while their tokens may live on.
            age = (context.now - blob.last_modified).total_seconds()
            if kind.retention is not None and age >= kind.retention(context.config):
                return "origin_expired"
        elif name["attempt"] in committed:
            return "in_flight"
        if blob.metadata.get("claim"):
            log.error("token %s is claimed but its origin never committed it", blob.name)
            return "claimed_not_committed"
        if row is not None and kind.fence is not None:
            # The row is uncommitted: a round far slower than the grace period assumes could
            # still commit this token. Change the row's ETag first, so that such a commit
            # (If-Match on the row) fails instead of signalling a token we are deleting.
            try:
                rows[origin] = await kind.fence(context.account.table(origin.table), row)
            except (PreconditionFailed, NotFound):
                rows.pop(origin, None)
                return "origin_changed"  # someone wrote it meanwhile: judge again next pass
        return "abandoned"


async def _get_row(table: Table, origin: Origin) -> Entity | None:
    try:
        return await table.get(origin.partition_key, origin.row_key)
    except (NotFound, InvalidName):
        return None


class OutboxRecords(CleanupTask):
    """Retire O(m) of one endpoint once its message and everything it sent are consumed."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"outbox.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        table = context.account.table(self.endpoint)
        page = await table.query(
            row_key_prefix=OUTBOX_PREFIX,
            page_size=context.settings.page_size,
            continuation=continuation,
        )
        for entity in page.entities:
            try:
                await self._judge(context, table, entity, report)
            except ROW_ERRORS as e:
                _skip_bad_row(report, _row(table, entity), e)
        return page.continuation

    async def _judge(
        self, context: CleanupContext, table: Table, entity: Entity, report: TaskReport
    ) -> None:
        record = OutboxRecord.from_entity(entity)
        if not record.committed:
            # A claim nobody committed. While the incoming token exists the message is still
            # to be processed (maybe parked in the poison queue): keep the claim.
            if not context.is_old(record.started_at):
                report.kept["young"] += 1
            elif await _exists(context.tokens, record.incoming_token):
                report.kept["incoming_pending"] += 1
            elif await _delete_row(table, entity):
                report.removed["unused_outbox_records"] += 1
            return
        if record.committed_at is None:
            raise CorruptRecord("committed outbox record without committed_at")
        if not context.is_old(record.committed_at):
            report.kept["young"] += 1
            return
        committed = {o.token for o in record.outgoing}
        prefix = token_prefix(self.endpoint, record.message_id)
        if await _clear_prefix(context, prefix, committed, report):
            report.kept["outputs_in_flight"] += 1
        elif await _exists(context.tokens, record.incoming_token):
            report.kept["incoming_pending"] += 1  # R7 not done yet; a redelivery will
        elif await _delete_row(table, entity):
            report.removed["outbox_records"] += 1


class IngressRecords(CleanupTask):
    """Remove ingress dedup records whose window has passed and whose tokens are gone."""

    id = "ingress"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        table = context.account.table(context.config.ingress_table)
        page = await table.query(
            row_keys=[INGRESS_ROW], page_size=context.settings.page_size, continuation=continuation
        )
        for entity in page.entities:
            try:
                await self._judge(context, table, entity, report)
            except ROW_ERRORS as e:
                _skip_bad_row(report, _row(table, entity), e)
        return page.continuation

    async def _judge(
        self, context: CleanupContext, table: Table, entity: Entity, report: TaskReport
    ) -> None:
        expires_at = entity.properties.get("expires_at")
        if isinstance(expires_at, datetime) and expires_at > context.now:
            report.kept["within_window"] += 1
            return
        outgoing = json.loads(str(entity.properties.get("outgoing", "[]")))
        committed = {OutgoingSignal.model_validate(o).token for o in outgoing}
        prefix = token_prefix(
            str(entity.properties["sender"]), str(entity.properties["incoming_id"])
        )
        if await _clear_prefix(context, prefix, committed, report):
            report.kept["outputs_in_flight"] += 1
        elif await _delete_row(table, entity):
            report.removed["ingress_records"] += 1


class AuditRows(CleanupTask):
    """Remove audit rows past their retention period (export them first to keep them)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"audit.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        table = context.account.table(self.endpoint)
        page = await table.query(
            row_key_prefix=AUDIT_PREFIX,
            page_size=context.settings.page_size,
            continuation=continuation,
        )
        cutoff = context.now - timedelta(seconds=context.settings.audit_retention_seconds)
        for entity in page.entities:
            processed_at = entity.properties.get("processed_at")
            if isinstance(processed_at, datetime) and processed_at > cutoff:
                report.kept["within_retention"] += 1
            elif await _delete_row(table, entity):
                report.removed["audit_rows"] += 1
        return page.continuation


Expiry = Callable[..., Awaitable[tuple[int, str | None]]]

# What each window-based mode keeps per message, the function that expires it, and the
# setting that says for how long. Token mode has no window: its records go with the tokens.
_MODE_EXPIRY: dict[str, tuple[str, Expiry, Callable[[BusConfig], float]]] = {
    "processed_messages": (
        "processed_rows",
        expire_processed,
        lambda c: c.processed_retention_seconds,
    ),
    "state_based": (
        "state_versions",
        truncate_state_streams,
        lambda c: c.state_stream_retention_seconds,
    ),
    "entity_outbox": (
        "entity_outbox_entries",
        expire_entity_outboxes,
        lambda c: c.entity_outbox_retention_seconds,
    ),
}


class ModeRetention(CleanupTask):
    """Remove what a window-based endpoint mode keeps past its retention period."""

    def __init__(self, endpoint: str, mode: str) -> None:
        self.endpoint = endpoint
        self.kind, self.expire, self.retention = _MODE_EXPIRY[mode]
        self.id = f"{self.kind}.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        cutoff = context.now - timedelta(seconds=self.retention(context.config))
        removed, following = await self.expire(
            context.account.table(self.endpoint),
            tokens=context.tokens,
            older_than=cutoff,
            page_size=max(2, min(context.settings.page_size, 1000)),
            continuation=continuation,
        )
        report.removed[self.kind] += removed
        return following


def standard_tasks(endpoints: Mapping[str, str] | Collection[str]) -> list[CleanupTask]:
    """Every task for these endpoints (a name-to-mode mapping; bare names are token mode).

    Tokens first: a pass that removes abandoned tokens lets the outbox task retire the
    records that were waiting on them in the same run."""
    modes = dict(endpoints) if isinstance(endpoints, Mapping) else dict.fromkeys(endpoints, "token")
    names = sorted(modes)
    tasks: list[CleanupTask] = [AbandonedTokens()]
    tasks += [OutboxRecords(e) for e in names]
    tasks.append(IngressRecords())
    tasks += [AuditRows(e) for e in names]
    tasks += [ModeRetention(e, modes[e]) for e in names if modes[e] in _MODE_EXPIRY]
    return tasks
