"""How a saga endpoint's instances stand (``shared.bus.saga``), for ``bus status`` and the
console's overview.

An instance is a partition's state row: live (its handlers run), or completed (the marker
the cleanup's task ``sagas.<endpoint>`` deletes after ``BUS_SAGA_RETENTION_SECONDS``). The
timeouts pending are summed over the live instances, with the earliest due among them (a
completed instance has none: completing cancels them). A row that cannot be read as an
instance, whether damaged in storage or holding what no saga wrote, is counted as
unreadable, never fatal to the count (messages that reach it fail on it, and are parked once
their tries are spent).

``saga_not_found`` messages are counted from the endpoint's audit rows (the property
``outcome``): every one the audit rows still hold, that is those processed within the
cleanup's audit retention (``CLEANUP_AUDIT_RETENTION_SECONDS``), and older ones where the
cleanup has not run. A damaged audit row is passed over, as the throughput's look passes
over it.

``bus status`` reads every row; the console, asked every few seconds, reads at most a number
of state rows and as many audit rows, and says when it stopped (``complete`` false: the
counts are then lower bounds, and the earliest due is of the instances read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared.bus.records import AUDIT_PREFIX, STATE_ROW
from shared.bus.saga import instance_row
from shared.bus.state.base import state_row
from shared.bus.state.damaged import ROW_ERRORS, DamagedRow
from shared.bus.state.rows import EndpointRows
from shared.errors import InvalidValue
from shared.stores.table import Entity

PAGE_SIZE = 1000
NOT_FOUND_OUTCOME = "saga_not_found"


@dataclass(frozen=True)
class SagaCounts:
    live: int = 0
    completed: int = 0
    """Completed instances whose marker is kept."""
    unreadable: int = 0
    timeouts_pending: int = 0
    """Over the live instances."""
    next_timeout_due: datetime | None = None
    """The earliest due of those timeouts (None: none has a due time)."""
    not_found: int = 0
    """Messages acknowledged as ``saga_not_found``, by the audit rows kept."""
    instances_scanned: int = 0
    """State rows read, unreadable ones included."""
    audit_rows_scanned: int = 0
    complete: bool = True
    """Every state row and audit row was read (else each count is a lower bound)."""

    def as_status(self) -> dict[str, int | str | None]:
        """The counts as ``bus status --json`` reports them."""
        due = self.next_timeout_due
        return {
            "saga_instances_live": self.live,
            "saga_instances_completed": self.completed,
            "saga_timeouts_pending": self.timeouts_pending,
            "saga_next_timeout_due": None if due is None else due.isoformat(),
            "saga_not_found": self.not_found,
            "saga_unreadable": self.unreadable,
        }


@dataclass
class _Tally:
    live: int = 0
    completed: int = 0
    unreadable: int = 0
    timeouts: int = 0
    next_due: datetime | None = None
    not_found: int = 0

    def add_instance(self, rows: EndpointRows, entity: Entity) -> None:
        try:
            row = instance_row(state_row(entity), rows.where(entity.partition_key, STATE_ROW))
        except ROW_ERRORS:
            self.unreadable += 1
            return
        if row.completed:
            self.completed += 1
            return
        self.live += 1
        self.timeouts += len(row.timeouts)
        # A due time without a zone was written by no bus: it cannot be compared, nor trusted.
        dues = [t.due for t in row.timeouts if t.due is not None and t.due.tzinfo is not None]
        if self.next_due is not None:
            dues.append(self.next_due)
        self.next_due = min(dues, default=None)

    def add_audit(self, entity: Entity) -> None:
        if entity.get("outcome") == NOT_FOUND_OUTCOME:
            self.not_found += 1


async def count_sagas(rows: EndpointRows, limit: int | None = None) -> SagaCounts:
    """The instances of ``rows``' saga endpoint and its ``saga_not_found`` messages, reading
    at most ``limit`` state rows and ``limit`` audit rows (None: every one)."""
    if limit is not None and limit < 1:
        raise InvalidValue(f"a count of saga instances reads at least one row, not {limit}")
    tally = _Tally()

    def instance(entity: Entity) -> None:
        tally.add_instance(rows, entity)

    def damaged(row: DamagedRow) -> None:
        tally.unreadable += 1

    instances, every_instance = await _scan(rows, STATE_ROW, None, limit, instance, damaged)
    audits, every_audit = await _scan(
        rows, None, AUDIT_PREFIX, limit, tally.add_audit, lambda row: None
    )
    return SagaCounts(
        live=tally.live,
        completed=tally.completed,
        unreadable=tally.unreadable,
        timeouts_pending=tally.timeouts,
        next_timeout_due=tally.next_due,
        not_found=tally.not_found,
        instances_scanned=instances,
        audit_rows_scanned=audits,
        complete=every_instance and every_audit,
    )


async def _scan(
    rows: EndpointRows,
    row_key: str | None,
    row_key_prefix: str | None,
    limit: int | None,
    each: Callable[[Entity], None],
    on_damaged: Callable[[DamagedRow], None],
) -> tuple[int, bool]:
    """Read the rows of ``row_key`` or ``row_key_prefix``, page by page, up to ``limit``:
    how many were read (damaged ones included), and whether that was all."""
    scanned, continuation = 0, None
    while True:
        damaged: list[DamagedRow] = []
        page, continuation = await rows.page(
            row_key=row_key,
            row_key_prefix=row_key_prefix,
            page_size=PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - scanned),
            continuation=continuation,
            on_damaged=damaged.append,
        )
        scanned += len(page) + len(damaged)
        for row in damaged:
            on_damaged(row)
        for entity in page:
            each(entity)
        if continuation is None or (limit is not None and scanned >= limit):
            return scanned, continuation is None
