"""How many of an endpoint's transactional sessions (``shared.bus.session``) are in each state,
for ``bus status`` and the console's overview.

A session record O(s) is open (a request in progress, or one that never committed, which the
cleanup retires after the grace period), committed and waiting to be signalled (its request
stopped between its commit and its signals, or is between them right now: the cleanup sends
them ``BUS_SESSION_RESEND_SECONDS`` after the commit), or finished (signalled, kept for its
key's dedup window). Anyone with write access to the store can leave a row that cannot be
read: it is counted as unreadable, never fatal to the count (the cleanup's sessions task names
it in its report); so is a record a newer version of the bus wrote during a rolling deploy,
which this version cannot judge.

``bus status`` counts every record; the console, asked every few seconds, stops after a
number of records and says it did (``complete`` false: the counts are then lower bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.bus.session_records import SESSION_PREFIX, SessionRecord
from shared.bus.state.damaged import ROW_ERRORS, DamagedRow
from shared.bus.state.rows import EndpointRows
from shared.errors import InvalidValue, NewerVersion
from shared.stores.table import Entity

PAGE_SIZE = 1000


@dataclass(frozen=True)
class SessionCounts:
    waiting: int = 0
    """Committed, their messages not yet signalled."""
    open: int = 0
    finished: int = 0
    unreadable: int = 0
    oldest_waiting_since: datetime | None = None
    """The commit of the session that has waited longest (None: none waits)."""
    scanned: int = 0
    """Records read, unreadable ones included."""
    complete: bool = True
    """Every record was read (else only ``scanned`` of them, and each count is a lower bound)."""

    def as_status(self) -> dict[str, int]:
        """The counts as ``bus status --json`` reports them."""
        return {
            "sessions_waiting": self.waiting,
            "sessions_open": self.open,
            "sessions_finished": self.finished,
            "sessions_unreadable": self.unreadable,
        }


@dataclass
class _Tally:
    waiting: int = 0
    open: int = 0
    finished: int = 0
    unreadable: int = 0
    oldest_waiting_since: datetime | None = None

    def add(self, entity: Entity) -> None:
        try:
            record = SessionRecord.from_entity(entity)
        except (*ROW_ERRORS, NewerVersion):
            self.unreadable += 1
            return
        if not record.committed:
            self.open += 1
        elif record.signalled:
            self.finished += 1
        else:
            self.waiting += 1
            since = record.committed_at or record.started_at
            if self.oldest_waiting_since is None or since < self.oldest_waiting_since:
                self.oldest_waiting_since = since


async def count_sessions(rows: EndpointRows, limit: int | None = None) -> SessionCounts:
    """The sessions of ``rows``' endpoint by state, reading at most ``limit`` records (None:
    every one)."""
    if limit is not None and limit < 1:
        raise InvalidValue(f"a count of session records reads at least one, not {limit}")
    tally = _Tally()
    scanned, continuation = 0, None
    while True:
        damaged: list[DamagedRow] = []
        page, continuation = await rows.page(
            row_key_prefix=SESSION_PREFIX,
            page_size=PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - scanned),
            continuation=continuation,
            on_damaged=damaged.append,
        )
        scanned += len(page) + len(damaged)
        tally.unreadable += len(damaged)
        for entity in page:
            tally.add(entity)
        if continuation is None or (limit is not None and scanned >= limit):
            break
    return SessionCounts(
        waiting=tally.waiting,
        open=tally.open,
        finished=tally.finished,
        unreadable=tally.unreadable,
        oldest_waiting_since=tally.oldest_waiting_since,
        scanned=scanned,
        complete=continuation is None,
    )
