"""The console's view of sagas (``docs/sagas.md``): each saga endpoint's instances and
``saga_not_found`` messages for the overview, and one instance looked up by its correlation
value.

The counts are ``bus status``'s (``shared.bus.saga_counts``), bounded as the overview's other
looks are. The look-up reads one state row, the instance's, and shows it as ``bus state``
does (``shared.bus.saga_view``). The correlation value comes from whoever asks: it must be a
partition key Table Storage accepts (``check_key``), else the request is refused with a 400
that does not repeat it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.bus.records import STATE_ROW
from shared.bus.saga_counts import SagaCounts
from shared.bus.saga_view import instance_view, unreadable
from shared.bus.state.damaged import DamagedRow
from shared.console.guard import Refused
from shared.errors import InvalidName
from shared.runtime import Worker
from shared.stores.names import check_key


def saga_figures(worker: Worker, counts: SagaCounts, now: datetime) -> dict[str, Any]:
    """A saga endpoint's figures in the overview, and how long a completed instance's marker
    is kept (a message for it meanwhile is ``saga_not_found``)."""
    due = counts.next_timeout_due
    return {
        "live": counts.live,
        "completed": counts.completed,
        "unreadable": counts.unreadable,
        "timeouts_pending": counts.timeouts_pending,
        "next_timeout_due": None if due is None else due.isoformat(timespec="seconds"),
        "next_timeout_overdue_seconds": (
            None if due is None else round(max((now - due).total_seconds(), 0.0), 1)
        ),
        "not_found": counts.not_found,
        "instances_scanned": counts.instances_scanned,
        "audit_rows_scanned": counts.audit_rows_scanned,
        "complete": counts.complete,
        "retention_seconds": worker.config.saga_retention_seconds,
    }


def saga_names(worker: Worker, running: list[str]) -> set[str]:
    """The sagas among the endpoints this console shows."""
    return {name for name in running if worker.app.endpoints[name].saga is not None}


def correlation_value(text: str | None) -> str:
    """The correlation value asked for, refused (400) unless it is a partition key."""
    if text is None:
        raise Refused(400, "name the instance: its correlation value (?instance=)")
    try:
        return check_key("PartitionKey", text)
    except InvalidName:
        raise Refused(
            400,
            "a correlation value is a partition key: at most 1 KiB of text, none of "
            "/ \\ # ? or a control character",
        ) from None


async def look_up(worker: Worker, endpoint: str, value: str, sagas: set[str]) -> dict[str, Any]:
    """The instance of saga ``endpoint`` whose correlation value is ``value``: ``instance``
    None when it has none (never started, or completed and retired); ``sagas``, every saga
    the console shows, for the page's next look-up."""
    rows = worker.endpoint_rows()[endpoint]
    damaged: list[DamagedRow] = []
    found = await rows.read(value, [STATE_ROW], on_damaged=damaged.append)
    instance: dict[str, Any] | None
    if damaged:
        instance = unreadable(damaged[0].error)
    else:
        instance = instance_view(found.get(STATE_ROW), rows.where(value, STATE_ROW))
    return {
        "endpoint": endpoint,
        "correlation": value,
        "instance": instance,
        "sagas": sorted(sagas),
    }
