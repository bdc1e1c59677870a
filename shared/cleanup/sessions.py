"""The sessions task: finish and retire the transactional sessions' records O(s) of one
endpoint (``shared.bus.session``).

- A committed O(s) not marked signalled, whose commit is older than
  ``BUS_SESSION_RESEND_SECONDS``, belongs to a request that stopped between its commit and
  its signals: its signals are sent now (again, maybe: each token is claimed once) and it is
  marked signalled. This is the bound on a committed session's messages waiting.
- An open O(s) older than the grace period belongs to a request that never committed (rolled
  back, failed or stopped): it is deleted while unchanged, which fences a commit stalled past
  the grace period (its If-Match fails). Its tokens, if any were created, are then uncommitted
  ones whose origin is gone, which the abandoned-tokens task deletes.
- A committed O(s) is retired once its key's dedup window (``BUS_INGRESS_WINDOW_SECONDS``)
  has passed since its commit and every token it committed is claimed or gone (abandoned ones
  under its prefix deleted first, as for O(m)). So an absent O(s) proves its tokens were
  never committed (``shared.cleanup.origins``).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import timedelta

from shared.bus.envelope import token_prefix
from shared.bus.outgoing import send_signals
from shared.bus.session_records import SESSION_PREFIX, SessionRecord
from shared.bus.state.rows import EndpointRows
from shared.cleanup.base import (
    UNJUDGED,
    CleanupContext,
    CleanupTask,
    clear_prefix,
    remove_rows,
    row_name,
    skip_unjudged,
    skipping,
    storage_error,
)
from shared.cleanup.batching import STORAGE_ERRORS
from shared.cleanup.report import TaskReport
from shared.concurrency import each
from shared.errors import NotFound, PreconditionFailed
from shared.stores.table import Entity


class SessionRecords(CleanupTask):
    """Finish the sessions of ``endpoint`` left unsignalled, and retire their records."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"sessions.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        rows = context.rows(self.endpoint)
        page, following = await rows.page(
            row_key_prefix=SESSION_PREFIX,
            page_size=context.settings.page_size,
            continuation=continuation,
            on_damaged=skipping(report),
        )

        async def judge(entity: Entity) -> tuple[Entity, str] | None:
            try:
                record = SessionRecord.from_entity(entity)
                kind = await self._judge(context, rows, record, report)
            except UNJUDGED as e:
                skip_unjudged(report, row_name(rows, entity), e)
            except STORAGE_ERRORS as e:
                storage_error(report, row_name(rows, entity), e)
            else:
                return None if kind is None else (entity, kind)
            return None

        verdicts = await each(context.limit, page, judge)
        await remove_rows(context, rows, [v for v in verdicts if v is not None], report)
        return following

    async def _judge(
        self,
        context: CleanupContext,
        rows: EndpointRows,
        record: SessionRecord,
        report: TaskReport,
    ) -> str | None:
        """The kind the record is removed as, or None when it stays."""
        if not record.committed:
            if not context.is_old(record.started_at):
                report.kept["young"] += 1
                return None
            return "open_sessions"
        committed_at = record.committed_at or record.started_at
        if not record.signalled:
            await self._finish(context, rows, record, report)
            return None
        window = timedelta(seconds=context.config.ingress_window_seconds)
        if committed_at + window > context.now:
            report.kept["dedup_window"] += 1
            return None
        prefix = token_prefix(self.endpoint, record.round_id)
        if await clear_prefix(context, prefix, record.token_names, report):
            report.kept["outputs_in_flight"] += 1
            return None
        return "session_records"

    async def _finish(
        self,
        context: CleanupContext,
        rows: EndpointRows,
        record: SessionRecord,
        report: TaskReport,
    ) -> None:
        """Signal a committed session its request left unsignalled, once it is older than
        ``BUS_SESSION_RESEND_SECONDS``; then mark it signalled (while unchanged: a request
        marking it meanwhile is as good)."""
        committed_at = record.committed_at or record.started_at
        wait = timedelta(seconds=context.config.session_resend_seconds)
        if committed_at + wait > context.now:
            report.kept["signalling"] += 1
            return
        await send_signals(context.account, record.outgoing, config=context.config)
        # Marked (or retired) by someone else since it was read: as good.
        with contextlib.suppress(PreconditionFailed, NotFound):
            await rows.update(replace(record, signalled=True).to_entity(), record.etag)
        report.changed["sessions_signalled"] += 1
