"""The ingress task: an ingress record goes after its window, once its tokens are gone."""

from __future__ import annotations

from datetime import datetime

from shared.bus.deliveries import decode_signals
from shared.bus.envelope import token_prefix
from shared.bus.ingress import INGRESS_ROW, ingress_version
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
from shared.cleanup.batching import (
    STORAGE_ERRORS,
)
from shared.cleanup.report import TaskReport
from shared.concurrency import each
from shared.stores.table import Entity


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
                skip_unjudged(report, row_name(rows, entity), e)
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
        if await clear_prefix(context, prefix, committed, report):
            report.kept["outputs_in_flight"] += 1
            return None
        return entity, "ingress_records"
