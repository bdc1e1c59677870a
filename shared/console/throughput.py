"""Throughput and latency of the last minutes, from the audit rows storage already holds.

Every mode writes one audit row per message it processes (RowKey ``audit|{m}``), in the same
transaction as the message's effects, with ``sent_at`` (when the message was created) and
``processed_at`` (when its round committed). The console counts, per endpoint, the rows
processed in each of the last ``WINDOW_MINUTES`` minutes, and gives the 50th and 95th
percentile of ``processed_at - sent_at`` over them: the time from sending to the committed
effect, queue wait and retries included (a delayed message counts from when it was sent, so
its delay is in it). Nothing is written on the message path for this. A transactional
session's audit row (mode ``session``) is no processed message: nobody sent the session, and
the messages it sent are counted where they are processed, as the audit counts them.

Audit row keys are not in time order, so finding the last minutes' rows means reading the
endpoint's audit rows, at most ``scan_limit`` of them a look (the cleanup removes rows older
than CLEANUP_AUDIT_RETENTION_SECONDS); a look that stops at the limit says so
(``complete`` false) and its figures cover only the rows read.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.bus.records import AUDIT_PREFIX
from shared.bus.session_records import SESSION_MODE
from shared.bus.state.rows import EndpointRows
from shared.stores.table import Entity

WINDOW_MINUTES = 15
PAGE_SIZE = 1000


@dataclass(frozen=True)
class Throughput:
    per_minute: list[tuple[datetime, int]]
    """Each of the last minutes (its start, UTC), oldest first, and the messages processed."""
    p50_ms: float | None
    p95_ms: float | None
    scanned: int
    complete: bool
    """Every audit row was read (else only ``scanned`` of them)."""


async def throughput(rows: EndpointRows, now: datetime, scan_limit: int) -> Throughput:
    """What ``rows``' endpoint processed in the last ``WINDOW_MINUTES`` minutes."""
    start = _minute(now) - timedelta(minutes=WINDOW_MINUTES - 1)
    counts: Counter[datetime] = Counter()
    latencies: list[float] = []
    scanned, continuation = 0, None
    while scanned < scan_limit:
        page, continuation = await rows.page(
            row_key_prefix=AUDIT_PREFIX,
            page_size=min(PAGE_SIZE, scan_limit - scanned),
            continuation=continuation,
            on_damaged=lambda damaged: None,  # a damaged row is not counted, nor fatal here
        )
        scanned += len(page)
        for entity in page:
            _count(entity, start, counts, latencies)
        if continuation is None:
            break
    minutes = [start + timedelta(minutes=i) for i in range(WINDOW_MINUTES)]
    return Throughput(
        per_minute=[(m, counts[m]) for m in minutes],
        p50_ms=_percentile(latencies, 50),
        p95_ms=_percentile(latencies, 95),
        scanned=scanned,
        complete=continuation is None,
    )


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _count(
    entity: Entity, start: datetime, counts: Counter[datetime], latencies: list[float]
) -> None:
    if entity.get("mode") == SESSION_MODE:
        return  # a session's commit: what it sent is counted where it is processed
    processed, sent = entity.get("processed_at"), entity.get("sent_at")
    if not isinstance(processed, datetime) or processed.tzinfo is None or processed < start:
        return
    counts[_minute(processed)] += 1
    if isinstance(sent, datetime) and sent.tzinfo is not None and sent <= processed:
        latencies.append((processed - sent).total_seconds() * 1000)


def _percentile(values: list[float], percent: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[percent - 1], 1)
