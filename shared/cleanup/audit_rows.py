"""The audit task: audit rows go after their retention period."""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.bus.records import AUDIT_PREFIX
from shared.cleanup.base import (
    CleanupContext,
    CleanupTask,
    remove_rows,
    skipping,
)
from shared.cleanup.report import TaskReport
from shared.stores.table import Entity


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
