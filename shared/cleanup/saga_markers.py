"""The saga task: delete the completed markers of one saga endpoint's instances once
``BUS_SAGA_RETENTION_SECONDS`` have passed since they completed (``shared.bus.saga``).

Until then, every message for a completed instance, a starting one too, is
``saga_not_found``; after it, the correlation value is free and a starting message begins a
new instance. A marker is deleted while unchanged (its ETag as read), so a commit that reads
it meanwhile keeps deciding against the marker it read: a message judged ``saga_not_found``
writes nothing of the instance, and nothing else can write a completed one. Live instances,
and rows that are not a saga's (an endpoint made a saga keeps its older rows live), are kept.
"""

from __future__ import annotations

from datetime import timedelta

from shared.bus.records import STATE_ROW
from shared.bus.saga import SAGA_ROW_TYPE, SagaRow
from shared.cleanup.base import (
    CleanupContext,
    CleanupTask,
    remove_rows,
    row_name,
    skip_unjudged,
    skipping,
)
from shared.cleanup.report import TaskReport
from shared.errors import CorruptRecord
from shared.stores.table import Entity


class SagaMarkers(CleanupTask):
    """Retire the completed instances of saga ``endpoint`` past their retention."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id = f"sagas.{endpoint}"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        rows = context.rows(self.endpoint)
        page, following = await rows.page(
            row_key_prefix=STATE_ROW,
            page_size=context.settings.page_size,
            continuation=continuation,
            on_damaged=skipping(report),
        )
        retention = timedelta(seconds=context.config.saga_retention_seconds)
        condemned: list[tuple[Entity, str]] = []
        for entity in page:
            if entity.row_key != STATE_ROW or entity.get("type") != SAGA_ROW_TYPE:
                continue
            try:
                row = SagaRow.decode(str(entity["data"]), row_name(rows, entity))
            except (CorruptRecord, KeyError) as e:
                skip_unjudged(report, row_name(rows, entity), CorruptRecord(str(e)))
                continue
            if row.completed_at is None:
                report.kept["live_instances"] += 1
            elif row.completed_at + retention > context.now:
                report.kept["completed_in_retention"] += 1
            else:
                condemned.append((entity, "completed_instances"))
        await remove_rows(context, rows, condemned, report)
        return following
