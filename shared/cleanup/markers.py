"""The cleanup's task for the markers of at-most-once effects (``shared.effects.markers``,
``docs/effects.md`` section 5).

A marker must outlive every copy of its request that could still reach the performer's
handler: a redelivery, a duplicate signal, an operator's replay of a parked request (parked
messages do not expire), and a copy already inside the handler when the request's token went.
Age alone says nothing of the first three, so the rule is the request's token being gone,
read from the performer's own rows: its O(m) is inserted (R3) before the handler inserts the
marker, and is retired only after the token is deleted (by the outbox task, which deletes
the token first, R7; or once an uncommitted O(m)'s token is gone), so a marker whose
partition holds no O(m) has no token left.
No new copy can pass R1 then; one already past it finishes within the grace period (the
timing assumption behind the abandoned tokens' grace). So the first pass that finds no O(m)
stamps the marker (``retiring_since``, with If-Match), and a pass at least the grace period
later deletes it (If-Match): the grace is counted from when the token was seen gone, never
from when the marker was written.
"""

from __future__ import annotations

from datetime import datetime

from shared.bus.records import OUTBOX_PREFIX
from shared.bus.state.rows import EndpointRows
from shared.cleanup.base import (
    CleanupContext,
    CleanupTask,
    remove_rows,
    row_name,
    skipping,
    storage_error,
)
from shared.cleanup.batching import STORAGE_ERRORS
from shared.cleanup.report import TaskReport
from shared.concurrency import each
from shared.effects.markers import MARKER_ROW
from shared.stores.table import Entity

RETIRING = "retiring_since"
"""When a pass first found the marker's request gone; set once, never moved."""


class RetiredMarkers(CleanupTask):
    """Retire the performer's at-most-once markers once no copy of their request can run."""

    id = "effect_markers"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        rows = context.rows(context.config.performer_endpoint)
        page, following = await rows.page(
            row_key=MARKER_ROW,
            page_size=context.settings.page_size,
            continuation=continuation,
            on_damaged=skipping(report),
        )

        async def judge(marker: Entity) -> tuple[Entity, str] | None:
            try:
                retired = await _judge(context, rows, marker, report)
            except STORAGE_ERRORS as e:  # PreconditionFailed included: judged again next pass
                storage_error(report, row_name(rows, marker), e)
                return None
            return (marker, "effect_markers") if retired else None

        verdicts = await each(context.limit, page, judge)
        await remove_rows(context, rows, [v for v in verdicts if v is not None], report)
        return following


async def _judge(
    context: CleanupContext, rows: EndpointRows, marker: Entity, report: TaskReport
) -> bool:
    """True when the marker may go now; else it is counted in ``report.kept``."""
    pending, _ = await rows.page(
        partition_key=marker.partition_key, row_key_prefix=OUTBOX_PREFIX, page_size=1
    )
    if pending:
        report.kept["request_pending"] += 1
        return False
    since = marker.get(RETIRING)
    if not isinstance(since, datetime):
        stamped = Entity(
            marker.partition_key, MARKER_ROW, {**marker.properties, RETIRING: context.now}
        )
        await rows.update(stamped, marker.etag)
        report.changed["effect_markers_stamped"] += 1
        return False
    if not context.is_old(since):
        report.kept["retiring"] += 1
        return False
    return True
