"""Events dropped for want of a subscriber, as the audit reads and reports them.

Publishing an event to a topic with no subscriber is legal, so no delivery exists and the
exactly-once checks cannot see it; the bus counts each drop in the topics container
(``shared.bus.unsubscribed``). The audit reads those records (from the account, or from an
export's ``dropped`` folder) and reports them per topic with their counts and times: the
user's events reached nobody, which the verdict must say (WARN) though the bus kept its
promise for every delivery it sent.

No pyspark here: the exporter uses it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from shared.audit.rows import Row
from shared.audit.summary import DroppedEvents
from shared.bus.messages import check_topic
from shared.bus.unsubscribed import unsubscribed_drops
from shared.errors import InvalidName, NotFound
from shared.resources import CONTAINERS
from shared.stores.account import StorageAccount

Takers = Callable[[str], list[str]]
"""Topic -> the app's endpoints that could subscribe to it (``Routes.takers_of``)."""


async def collect_dropped(
    account: StorageAccount, container: str = CONTAINERS["topics"]
) -> list[Row]:
    """``DROPPED_COLUMNS`` of every topic's record; none when the container does not exist."""
    try:
        drops = await unsubscribed_drops(account.blob_container(container))
    except NotFound:
        return []
    return [(d.topic, d.count, d.first, d.last) for d in drops]


def _iso(value: object) -> str | None:
    """ISO-8601 UTC; a naive time is Spark's, collected in the local time zone. One that
    cannot be moved to UTC (near year 1 or 9999) is unknown."""
    if not isinstance(value, datetime):
        return None
    try:
        return value.astimezone(UTC).isoformat()
    except (OverflowError, ValueError):
        return None


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def dropped_events(rows: Iterable[Row], takers: Takers | None) -> list[DroppedEvents]:
    """The summary's records, by topic. Rows come from files anyone may have written: a row
    whose topic is no topic name is left out, a count that is not a positive number reads
    as 0 and a time that is not one as unknown. ``takers`` is None when the audited app is
    not known (an export audited without ``--app``): the fix then names both cases."""
    found: dict[str, DroppedEvents] = {}
    for topic, count, first, last in (tuple(r) for r in rows):
        if not isinstance(topic, str):
            continue
        try:
            check_topic(topic)
        except InvalidName:
            continue
        found[topic] = DroppedEvents(
            topic=topic,
            dropped=_count(count),
            first_dropped_at=_iso(first),
            last_dropped_at=_iso(last),
            takers=None if takers is None else takers(topic),
        )
    return [found[t] for t in sorted(found)]
