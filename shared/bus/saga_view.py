"""A saga instance as operators see it (``bus state`` on a saga, the console's look-up): live
or completed and when, the message that started it, its pending timeouts, as JSON.

The instance is read as the receiver reads it (``shared.bus.saga.instance_row``): a row
written before the endpoint became a saga is a live instance, and a row that is neither is
shown as unreadable with why, escaped, since anyone with write access to the store wrote
it. The user's state is not part of the view: ``bus state`` shows the rows themselves.
"""

from __future__ import annotations

from typing import Any

from shared.bus.saga import instance_row
from shared.bus.state.base import state_row
from shared.bus.state.damaged import ROW_ERRORS
from shared.logsafe import shown
from shared.stores.table import Entity

REASON_CHARS = 1000


def instance_view(state: Entity | None, where: str) -> dict[str, Any] | None:
    """The instance whose state row is ``state`` (None when there is none: never started,
    or completed and retired); ``{"unreadable": why}`` when it cannot be read."""
    if state is None:
        return None
    try:
        row = instance_row(state_row(state), where)
    except ROW_ERRORS as e:
        return unreadable(e)
    return {
        "status": "completed" if row.completed else "live",
        "completed_at": None if row.completed_at is None else row.completed_at.isoformat(),
        "started_by": row.started_by,
        "pending_timeouts": [
            {
                "message_id": t.message_id,
                "type": t.type,
                "due": None if t.due is None else t.due.isoformat(),
            }
            for t in row.timeouts
        ],
    }


def unreadable(error: BaseException) -> dict[str, Any]:
    """An instance whose row cannot be read, and why (escaped, cut)."""
    return {"unreadable": shown(error, REASON_CHARS)}
