"""The cleanup's tasks: each pages through one kind of record and removes what is evicted.

Every decision here is safe on its own, whatever else runs concurrently (receivers, other
cleanup instances): deletions are ETag-guarded or idempotent, and nothing that was or will be
signalled is deleted (design notes section 3):
- a token is deleted only when it is older than the grace period, unclaimed, and its origin
  row does not list it as committed (``shared.cleanup.origins``);
- a committed O(m) is retired once every token it committed is gone or claimed (consumed
  or received, so signalled) and no abandoned one is left under its prefix; its incoming
  token is deleted first (R7, which the receiver leaves to the cleanup:
  ``shared.bus.receiver``). An uncommitted O(m) is retired only once its incoming token is
  gone;
- an ingress record is removed only after its window, and only once its tokens are gone;
- audit rows are removed after their retention period;
- a shared payload is removed once no token can still need it (``shared.cleanup.payloads``);
- a discarded message's archive entry is removed once its retention has passed
  (``shared.cleanup.discarded``).

Every task reaches an endpoint's rows one way, ``CleanupContext.rows`` (an ``EndpointRows``,
``shared.bus.state.rows``), whichever store keeps them. The cleanup does not choose the store:
whoever composes it hands it every endpoint's rows, already chosen from the endpoint's
declaration (its table, or PostgreSQL for ``store="postgres"``: ``Worker.endpoint_rows``,
``shared.bus.state.stores.endpoints_rows``). So each judgement, and what is done with a row
that cannot be read (``shared.bus.state.damaged``), is written once for every store. The
ingress records are no endpoint's rows: they are always in the ingress table.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.bus.config import BusConfig
from shared.bus.deliveries import decode_signals
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.bus.envelope import TOKEN_NAME, token_prefix
from shared.bus.formats import metadata_version
from shared.bus.ingress import INGRESS_ROW, ingress_version
from shared.bus.modes.entity_outbox import expire_entity_outboxes
from shared.bus.modes.processed_table import expire_processed
from shared.bus.modes.state_based import truncate_state_streams
from shared.bus.origin import Origin
from shared.bus.outgoing import DUE_METADATA, ORIGIN_METADATA
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, OutboxRecord
from shared.bus.state.damaged import ROW_ERRORS, DamagedRow, OnDamaged
from shared.bus.state.rows import EndpointRows, TableRows
from shared.cleanup.batching import (
    STORAGE_ERRORS,
    delete_batched,
    delete_blobs,
    delete_rows,
    read_rows,
)
from shared.cleanup.origins import OriginKind, kind_of
from shared.cleanup.report import TaskReport, describe
from shared.cleanup.settings import CleanupSettings
from shared.concurrency import each
from shared.errors import (
    ConfigurationError,
    CorruptRecord,
    InvalidValue,
    NewerVersion,
    NotFound,
    PreconditionFailed,
)
from shared.logsafe import shown
from shared.stores.account import StorageAccount
from shared.stores.blob import ANY_ETAG, BlobContainer, BlobProperties
from shared.stores.table import Entity

log = logging.getLogger(__name__)


def _skip_bad_row(report: TaskReport, what: str, error: BaseException) -> None:
    """Report a record that cannot be judged and pass over it: one bad row must not keep
    every later one from being cleaned, nor end the run."""
    log.warning("cleanup %s: skipping bad record %s: %s", report.task, what, describe(error))
    report.bad_row(what, error)


def skipping(report: TaskReport) -> OnDamaged:
    """What a store's page does with a row it cannot read: skip it as a bad record."""
    return lambda damaged: _skip_bad_row(report, damaged.where, damaged.error)


UNJUDGED = (NewerVersion, *ROW_ERRORS)
"""What keeps a record or token from being judged: a newer version wrote it, or it is bad."""


def _skip_unjudged(report: TaskReport, what: str, error: BaseException) -> None:
    """Keep a record or token this version cannot judge, and pass over it: one a newer
    version wrote is kept for an upgraded instance's cleanup (never deleted on a guess), a bad
    one is reported as such."""
    if isinstance(error, NewerVersion):
        log.warning("cleanup %s: keeping %s: %s", report.task, what, shown(error))
        report.kept["newer_version"] += 1
    else:
        _skip_bad_row(report, what, error)


def storage_error(report: TaskReport, what: str, error: BaseException) -> None:
    log.warning("cleanup %s: %s left for the next pass: %s", report.task, what, error)
    report.kept["storage_error"] += 1


def _add(counter: Counter[str], key: str, count: int) -> None:
    """Count only what happened, so a report lists no zeros."""
    if count:
        counter[key] += count


def row_name(rows: EndpointRows, entity: Entity) -> str:
    return rows.where(entity.partition_key, entity.row_key)


@dataclass(frozen=True)
class CleanupContext:
    account: StorageAccount
    config: BusConfig
    settings: CleanupSettings
    endpoints: Mapping[str, EndpointRows]
    """The endpoints the cleanup looks after, each with its rows, in whichever store keeps
    them: chosen by whoever composes the cleanup, never here."""
    now: datetime
    limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    """How many records are judged at once. The job shares one limit of
    ``CLEANUP_CONCURRENCY`` across a pass; a context made on its own (a sweep, a simulation)
    judges one record at a time, so its storage calls come in a fixed order."""

    def rows(self, table: str) -> EndpointRows:
        """The rows of an endpoint (as given in ``endpoints``) or of the ingress table: the
        tasks' one way to any row."""
        rows = self.endpoints.get(table)
        if rows is not None:
            return rows
        if table == self.config.ingress_table:
            # The ingress records are the bus's own, no endpoint's: always in this table.
            return TableRows(self.account.table(table))
        raise ConfigurationError(f"the cleanup was given no rows of endpoint {table}")

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.grace_seconds)

    @property
    def tokens(self) -> BlobContainer:
        return self.account.blob_container(self.config.tokens_container)

    @property
    def payloads(self) -> BlobContainer:
        return self.account.blob_container(self.config.payloads_container)

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


async def _clear_prefix(
    context: CleanupContext, prefix: str, committed: Collection[str], report: TaskReport
) -> int:
    """Delete the abandoned tokens under a sender-scoped prefix; return how many tokens must
    still wait there (committed ones not yet received, or abandoned ones still young).

    A committed token that is claimed counts as consumed: its receiver read it, so it was
    signalled, and the receiver's own cleanup deletes it (R7 is the cleanup's). Waiting for
    it to be gone would keep each sender's record one pass longer per hop of a chain."""
    waiting = 0
    doomed: list[BlobProperties] = []
    async for blob in context.tokens.list(prefix):
        if blob.name in committed:
            waiting += not blob.metadata.get("claim")
        elif (
            not context.is_old(blob.last_modified)
            or not _readable_metadata(blob, report)  # never deleted on a guess
        ):
            waiting += 1
        elif blob.metadata.get("claim"):
            waiting += 1  # claimed means signalled: never ours, whatever the record says
        else:
            doomed.append(blob)
    # One that could not be deleted was consumed or deleted since it was listed.
    _add(report.removed, "abandoned_tokens", await delete_blobs(context.tokens, doomed))
    return waiting


def _readable_metadata(blob: BlobProperties, report: TaskReport) -> bool:
    """Whether this version reads the token's metadata; one it cannot read (newer, or
    damaged) is kept, and reported."""
    try:
        metadata_version(blob.metadata, f"token {shown(blob.name)}")
    except UNJUDGED as e:
        _skip_unjudged(report, f"token {blob.name!r}", e)
        return False
    return True


async def remove_rows(
    context: CleanupContext,
    rows: EndpointRows,
    condemned: Sequence[tuple[Entity, str]],
    report: TaskReport,
) -> None:
    """Delete the rows judged removable (each with the kind it is counted as); a row that
    changed since it was read stays for the next pass."""
    kinds = {(e.partition_key, e.row_key): kind for e, kind in condemned}
    deleted = await delete_rows(context.limit, rows, [e for e, _ in condemned])
    for row in deleted:
        report.removed[kinds[row.partition_key, row.row_key]] += 1
    _add(report.kept, "changed", len(condemned) - len(deleted))  # judged again next pass


def since(blob: BlobProperties) -> datetime:
    """Since when a token's age counts: its last change, or for a delayed message its due time
    (``shared.bus.schedule``), before which it is in flight however old it is. A due time
    that does not parse counts as none: the token is then judged by its age as any other."""
    due = blob.metadata.get(DUE_METADATA)
    if due:
        try:
            return max(blob.last_modified, datetime.fromisoformat(due))
        except (ValueError, TypeError):
            log.warning("token %s has a due time that is not a time: %r", blob.name, due[:80])
    return blob.last_modified


Verdict = str
"""'abandoned', or why a token stays (a ``kept`` reason)."""
FENCE = "fence"
"""An abandoned token whose uncommitted origin row must be fenced before it goes."""


class AbandonedTokens(CleanupTask):
    """Every token in the container (or under one sender's prefix), judged by its origin
    row (``shared.cleanup.origins``)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.id = f"tokens.{prefix.rstrip('/')}" if prefix else "tokens"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        page = await context.tokens.list_page(
            self.prefix, page_size=context.settings.page_size, continuation=continuation
        )
        doomed: list[BlobProperties] = []
        waiting: list[tuple[BlobProperties, re.Match[str], Origin, OriginKind]] = []
        for blob in page.items:
            if not context.is_old(since(blob)):
                report.kept["young"] += 1
                continue
            try:
                parsed = self._parse(context, blob)
            except UNJUDGED as e:
                _skip_unjudged(report, f"token {blob.name!r}", e)
                continue
            if parsed == "abandoned":
                doomed.append(blob)
            elif isinstance(parsed, str):
                report.kept[parsed] += 1
            else:
                waiting.append((blob, *parsed))
        rows = await read_rows(context.limit, context.rows, {w[2] for w in waiting})
        fences: dict[Origin, list[BlobProperties]] = {}
        for blob, name, origin, kind in waiting:
            if origin not in rows:
                report.kept["storage_error"] += 1  # its row could not be read
                continue
            row = rows[origin]
            if isinstance(row, DamagedRow):  # nothing to judge it by: kept, and reported
                _skip_bad_row(report, f"token {blob.name!r} of {row.where}", row.error)
                continue
            try:
                verdict = self._judge(context, blob, name, kind, row)
            except UNJUDGED as e:
                _skip_unjudged(report, f"token {blob.name!r}", e)
                continue
            if verdict == "abandoned":
                doomed.append(blob)
            elif verdict == FENCE:
                fences.setdefault(origin, []).append(blob)
            else:
                report.kept[verdict] += 1
        doomed += await self._fence(context, rows, fences, report)
        _add(report.removed, "abandoned_tokens", await delete_blobs(context.tokens, doomed))
        return page.continuation

    @staticmethod
    def _parse(
        context: CleanupContext, blob: BlobProperties
    ) -> Verdict | tuple[re.Match[str], Origin, OriginKind]:
        """The token's name and origin, or the verdict when they alone decide it; its
        metadata's format first (NewerVersion, CorruptRecord)."""
        metadata_version(blob.metadata, f"token {shown(blob.name)}")
        name = TOKEN_NAME.fullmatch(blob.name)
        found = origin_of(context, blob)
        if isinstance(found, str):
            return found
        if name is None:
            log.warning("token %s is outside the token naming scheme", shown(blob.name))
            return "bad_origin"
        return name, *found

    @staticmethod
    def _judge(
        context: CleanupContext,
        blob: BlobProperties,
        name: re.Match[str],
        kind: OriginKind,
        row: Entity | None,
    ) -> Verdict:
        committed = None if row is None else kind.committed_attempts(row, name["incoming"])
        if committed is None:
            # The row says nothing about this message. That proves the token was never
            # committed unless rows of this kind expire while their tokens may live on. (By
            # its creation, not its due time: the row is as old as the token at most.)
            age = (context.now - blob.last_modified).total_seconds()
            if kind.retention is not None and age >= kind.retention(context.config):
                return "origin_expired"
        elif name["attempt"] in committed:
            return "in_flight"
        if blob.metadata.get("claim"):
            if committed is None:
                # Its origin retired the record (a claimed output counts as consumed): the
                # token is its receiver's now, deleted by the receiver's cleanup (R7).
                return "claimed_by_receiver"
            log.error("token %s is claimed but its origin never committed it", blob.name)
            return "claimed_not_committed"
        if row is not None and kind.fence is not None:
            return FENCE
        return "abandoned"

    @staticmethod
    async def _fence(
        context: CleanupContext,
        rows: dict[Origin, Entity | DamagedRow | None],
        fences: dict[Origin, list[BlobProperties]],
        report: TaskReport,
    ) -> list[BlobProperties]:
        """The row is uncommitted: a round far slower than the grace period assumes could
        still commit these tokens. Change the row's ETag first (once per row), so that such a
        commit (If-Match on the row) fails instead of signalling a token we are deleting."""

        async def fence(origin: Origin) -> list[BlobProperties]:
            row, kind = rows[origin], kind_of(origin.row_key)
            if not isinstance(row, Entity) or kind is None or kind.fence is None:
                return []
            try:
                await kind.fence(context.rows(origin.table), row)
            except (PreconditionFailed, NotFound):
                # Someone wrote it meanwhile: judge these tokens again next pass.
                report.kept["origin_changed"] += len(fences[origin])
                return []
            except STORAGE_ERRORS as e:
                log.warning("cleanup: origin %s not fenced: %s", origin.encode(), e)
                report.kept["storage_error"] += len(fences[origin])
                return []
            return fences[origin]

        fenced = await each(context.limit, list(fences), fence)
        return [blob for blobs in fenced for blob in blobs]


def origin_of(context: CleanupContext, blob: BlobProperties) -> Verdict | tuple[Origin, OriginKind]:
    """The origin row a token's or a shared payload's metadata names and its kind, or the
    verdict when the metadata alone decides (none recorded, or one outside this bus)."""
    raw = blob.metadata.get(ORIGIN_METADATA)
    if not raw:
        return _without_origin(context, blob)
    try:
        origin: Origin | None = Origin.decode(raw)
    except InvalidValue:
        origin = None
    kind = None if origin is None else kind_of(origin.row_key)
    known_tables = {*context.endpoints, context.config.ingress_table}
    if origin is None or kind is None or origin.table not in known_tables:
        # Never let a blob's metadata point the cleanup at an arbitrary table.
        log.warning("blob %s has an origin outside this bus: %s", shown(blob.name), shown(raw))
        return "bad_origin"
    return origin, kind


def _without_origin(context: CleanupContext, blob: BlobProperties) -> Verdict:
    """A token with no origin metadata (written before origins were recorded, or by a writer
    that does not record them) cannot be judged by its origin row. It is kept while its
    message could still be in flight: up to the ingress window, the longest time the bus
    keeps anything about a message it has not retired (a queue message lives 7 days too).
    Past that window, and unclaimed, nothing can still be waiting to consume it."""
    age = (context.now - since(blob)).total_seconds()
    if blob.metadata.get("claim") or age < context.config.ingress_window_seconds:
        return "no_origin"
    return "abandoned"


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
                _skip_unjudged(report, row_name(rows, entity), e)
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
        committed = {o.token for o in record.outgoing}
        prefix = token_prefix(self.endpoint, record.message_id)
        if await _clear_prefix(context, prefix, committed, report):
            report.kept["outputs_in_flight"] += 1
            return None
        return "outbox_records"


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
    _add(report.removed, "incoming_tokens", deleted)

    def waiting(r: _Retired) -> bool:
        return r.record.committed and r.record.incoming_token not in gone

    _add(report.kept, "storage_error", sum(map(waiting, retired)))
    return [r for r in retired if not waiting(r)]


class IngressRecords(CleanupTask):
    """Remove ingress dedup records whose window has passed and whose tokens are gone."""

    id = "ingress"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        rows = context.rows(context.config.ingress_table)
        page, following = await rows.page(
            row_key=INGRESS_ROW,
            page_size=context.settings.page_size,
            continuation=continuation,
            on_damaged=skipping(report),
        )

        async def judge(entity: Entity) -> tuple[Entity, str] | None:
            try:
                return await self._judge(context, entity, report)
            except UNJUDGED as e:
                _skip_unjudged(report, row_name(rows, entity), e)
            except STORAGE_ERRORS as e:
                storage_error(report, row_name(rows, entity), e)
            return None

        verdicts = await each(context.limit, page, judge)
        await remove_rows(context, rows, [v for v in verdicts if v is not None], report)
        return following

    async def _judge(
        self, context: CleanupContext, entity: Entity, report: TaskReport
    ) -> tuple[Entity, str] | None:
        ingress_version(entity)
        expires_at = entity.properties.get("expires_at")
        if isinstance(expires_at, datetime) and expires_at > context.now:
            report.kept["within_window"] += 1
            return None
        outgoing = decode_signals(str(entity.properties.get("outgoing", "[]")))
        committed = {o.token for o in outgoing}
        prefix = token_prefix(
            str(entity.properties["sender"]), str(entity.properties["incoming_id"])
        )
        if await _clear_prefix(context, prefix, committed, report):
            report.kept["outputs_in_flight"] += 1
            return None
        return entity, "ingress_records"


class AuditRows(CleanupTask):
    """Remove audit rows past their retention period (export them first to keep them)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"audit.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        cutoff = context.now - timedelta(seconds=context.settings.audit_retention_seconds)
        rows = context.rows(self.endpoint)
        page, following = await rows.page(
            row_key_prefix=AUDIT_PREFIX,
            page_size=context.settings.page_size,
            continuation=continuation,
            on_damaged=skipping(report),
        )
        expired: list[tuple[Entity, str]] = []
        for entity in page:
            processed_at = entity.properties.get("processed_at")
            if isinstance(processed_at, datetime) and processed_at > cutoff:
                report.kept["within_retention"] += 1
            else:
                expired.append((entity, "audit_rows"))
        await remove_rows(context, rows, expired, report)
        return following


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
            context.rows(self.endpoint),
            tokens=context.tokens,
            older_than=cutoff,
            page_size=max(2, min(context.settings.page_size, 1000)),
            continuation=continuation,
            on_damaged=skipping(report),
        )
        report.removed[self.kind] += removed
        return following


def standard_tasks(endpoints: Mapping[str, str] | Collection[str]) -> list[CleanupTask]:
    """Every task for these endpoints (a name-to-mode mapping; bare names are token mode).

    The job runs them side by side; none waits on another, since the outbox and ingress
    tasks delete the abandoned tokens under their own records' prefixes themselves. A sweep
    (``lab.cleanup.sweep``) runs them in this order."""
    modes = dict(endpoints) if isinstance(endpoints, Mapping) else dict.fromkeys(endpoints, "token")
    names = sorted(modes)
    tasks: list[CleanupTask] = [AbandonedTokens()]
    tasks += [OutboxRecords(e) for e in names]
    tasks.append(IngressRecords())
    tasks += [AuditRows(e) for e in names]
    tasks += [ModeRetention(e, modes[e]) for e in names if modes[e] in _MODE_EXPIRY]
    # These modules build on this one's CleanupTask.
    from shared.cleanup.discarded import ExpiredDiscards
    from shared.cleanup.parked import poison_tasks
    from shared.cleanup.payloads import SharedPayloads

    tasks.append(SharedPayloads())
    tasks += poison_tasks(names)
    tasks.append(ExpiredDiscards())
    if PERFORMER_ENDPOINT in modes:
        from shared.cleanup.markers import RetiredMarkers

        tasks.append(RetiredMarkers())
    return tasks
