"""The tokens task: every token in the container (or under one sender's prefix), judged by
its origin row (``shared.cleanup.origins``); an abandoned one goes after the grace period.

The tokens container is shared by the apps of a system (``shared.resources``), so the listing
holds other apps' tokens too. A token whose origin metadata is well formed but names a table
that is neither one of this app's endpoints nor its ingress table was sent by another app: it
is kept as ``other_app``, neither judged nor reported, since this app cannot read that row
(it may be in another app's state account) and nothing about it is wrong. Its own app's
cleanup judges it by its origin row, and its receiver consumes it (R7), so keeping it here
loses nothing and leaves nothing behind. Judging it here instead would read a table this app
does not own, and finding no row there, delete a committed token in flight: a lost message.
Only metadata that does not decode to an origin of this bus stays ``bad_origin``, with a
warning. What an attacker gains by writing a token with a made-up foreign origin: a blob that
is kept, as before this distinction, when the same blob was kept as ``bad_origin``; never a
read of the table it names, and nothing is processed, since a token is received only through
a signal naming it.
"""

from __future__ import annotations

import logging
import re

from shared.bus.envelope import TOKEN_NAME
from shared.bus.formats import metadata_version
from shared.bus.origin import Origin
from shared.bus.outgoing import ORIGIN_METADATA
from shared.bus.state.damaged import DamagedRow
from shared.cleanup.base import (
    UNJUDGED,
    CleanupContext,
    CleanupTask,
    add_count,
    since,
    skip_bad_row,
    skip_unjudged,
)
from shared.cleanup.batching import (
    STORAGE_ERRORS,
    delete_blobs,
    read_rows,
)
from shared.cleanup.origins import OriginKind, kind_of
from shared.cleanup.report import TaskReport
from shared.concurrency import each
from shared.errors import (
    InvalidName,
    InvalidValue,
    NotFound,
    PreconditionFailed,
)
from shared.logsafe import shown
from shared.stores.blob import BlobProperties
from shared.stores.names import check_table_name
from shared.stores.table import Entity

# One logger for every task's lines, under the name they have always had, so that a log
# filter written for the cleanup's tasks keeps working whichever module a task lives in.
log = logging.getLogger("shared.cleanup.tasks")


Verdict = str
"""'abandoned', or why a token stays (a ``kept`` reason)."""
OTHER_APP = "other_app"
"""A token or payload another app of the system sent, kept for its own cleanup."""
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
                skip_unjudged(report, f"token {blob.name!r}", e)
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
                skip_bad_row(report, f"token {blob.name!r} of {row.where}", row.error)
                continue
            try:
                verdict = self._judge(context, blob, name, kind, row)
            except UNJUDGED as e:
                skip_unjudged(report, f"token {blob.name!r}", e)
                continue
            if verdict == "abandoned":
                doomed.append(blob)
            elif verdict == FENCE:
                fences.setdefault(origin, []).append(blob)
            else:
                report.kept[verdict] += 1
        doomed += await self._fence(context, rows, fences, report)
        add_count(report.removed, "abandoned_tokens", await delete_blobs(context.tokens, doomed))
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
    verdict when the metadata alone decides (none recorded, one of another app, or one
    outside this bus)."""
    raw = blob.metadata.get(ORIGIN_METADATA)
    if not raw:
        return _without_origin(context, blob)
    try:
        origin: Origin | None = Origin.decode(raw)
    except InvalidValue:
        origin = None
    kind = None if origin is None else kind_of(origin.row_key)
    if origin is None or kind is None or not _names_a_table(origin):
        log.warning("blob %s has an origin outside this bus: %s", shown(blob.name), shown(raw))
        return "bad_origin"
    if origin.table not in {*context.endpoints, context.config.ingress_table}:
        # Another app's: its cleanup judges it (see the module). Never let a blob's metadata
        # point this cleanup at a table it does not own.
        return OTHER_APP
    return origin, kind


def _names_a_table(origin: Origin) -> bool:
    """Whether the origin's table is a name a table could have (another app's, say)."""
    try:
        check_table_name(origin.table)
    except InvalidName:
        return False
    return True


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
