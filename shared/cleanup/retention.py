"""The window modes' task: what a window-based endpoint mode keeps past its retention period
(processed rows, state versions, entity outbox entries) goes, each mode's expiry deleting the
uncommitted tokens of a message's rounds before its record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from shared.bus.config import BusConfig
from shared.bus.modes.entity_outbox import expire_entity_outboxes
from shared.bus.modes.processed_table import expire_processed
from shared.bus.modes.state_based import truncate_state_streams
from shared.cleanup.base import (
    CleanupContext,
    CleanupTask,
    skipping,
)
from shared.cleanup.report import TaskReport

Expiry = Callable[..., Awaitable[tuple[int, str | None]]]

# What each window-based mode keeps per message, the function that expires it, and the
# setting that says for how long. Token mode has no window: its records go with the tokens.
MODE_EXPIRY: dict[str, tuple[str, Expiry, Callable[[BusConfig], float]]] = {
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
        self.kind, self.expire, self.retention = MODE_EXPIRY[mode]
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
