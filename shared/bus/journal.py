"""The journal of operators' actions on parked messages: every replay and discard, from the
console or the command line, with who, when, what, which endpoint, which messages, how many
and why.

One row per action in the ``operatoractions`` table (``shared.resources.TABLES``), all in one
partition, keyed so that the newest comes first. The row is written before the action runs
(``done`` false, no count) and completed after it: an action interrupted half-way stays in
the journal, marked as never finished, rather than missing from it. Every text is kept as
given (bounded), for whoever reads it to show as text: it may quote a message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from shared.errors import NotFound
from shared.stores.table import Entity, Table

PARTITION = "actions"
WHATS = ("replay", "discard")
MAX_TEXT_CHARS = 2000
"""Of a selector or a reason: the journal keeps what a person reads, not whole id lists."""
MAX_WHO_CHARS = 200
_LAST_MS = 10**13  # past the year 2286 in milliseconds: row keys stay 13 digits


@dataclass(frozen=True)
class Action:
    id: str
    at: datetime
    who: str
    what: str
    endpoint: str
    selector: str
    """Which messages, as a person reads it: ``ids a, b`` or ``type T, error E``."""
    reason: str | None
    count: int = 0
    done: bool = False
    """False until the action finished: one that stays False was interrupted."""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.astimezone(UTC).isoformat(timespec="seconds"),
            "who": self.who,
            "what": self.what,
            "endpoint": self.endpoint,
            "selector": self.selector,
            "count": self.count,
            "reason": self.reason,
            "done": self.done,
        }


def new_action(
    what: str, *, who: str, endpoint: str, selector: str, reason: str | None, at: datetime
) -> Action:
    if what not in WHATS:
        raise ValueError(f"an action is one of {WHATS}, not {what!r}")
    return Action(
        id=str(uuid.uuid4()),
        at=at,
        who=_bounded(who, MAX_WHO_CHARS),
        what=what,
        endpoint=endpoint,
        selector=_bounded(selector, MAX_TEXT_CHARS),
        reason=None if reason is None else _bounded(reason, MAX_TEXT_CHARS),
    )


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more)"


def _row_key(action: Action) -> str:
    newest_first = _LAST_MS - int(action.at.timestamp() * 1000)
    return f"{newest_first:013d}-{action.id}"


def _entity(action: Action) -> Entity:
    properties: dict[str, Any] = {
        "id": action.id,
        "at": action.at.astimezone(UTC),
        "who": action.who,
        "what": action.what,
        "endpoint": action.endpoint,
        "selector": action.selector,
        "count": action.count,
        "done": action.done,
    }
    if action.reason is not None:
        properties["reason"] = action.reason
    return Entity(PARTITION, _row_key(action), properties)


class Journal:
    """The actions journal in ``table``."""

    def __init__(self, table: Table) -> None:
        self.table = table

    async def begin(self, action: Action) -> None:
        """Record ``action`` before it runs."""
        await self.table.insert(_entity(action))

    async def finish(self, action: Action, count: int) -> Action:
        """Record that ``action`` finished, having taken ``count`` messages."""
        done = replace(action, count=count, done=True)
        await self.table.upsert(_entity(done))
        return done

    async def page(self, skip: int, size: int) -> tuple[int, list[Action]]:
        """How many actions the journal holds, and ``size`` of them after the newest
        ``skip``, newest first. Rows that are not the journal's are left out."""
        total, found = 0, []
        try:
            async for entity in self.table.query_all(partition_key=PARTITION):
                action = _action(entity)
                if action is None:
                    continue
                if skip <= total < skip + size:
                    found.append(action)
                total += 1
        except NotFound:
            return 0, []
        return total, found


def _action(entity: Entity) -> Action | None:
    """An action from its row, or None for a row the journal did not write."""
    p = entity.properties
    texts = [p.get(k) for k in ("id", "who", "what", "endpoint", "selector")]
    at, count, done, reason = p.get("at"), p.get("count"), p.get("done"), p.get("reason")
    if (
        not all(isinstance(t, str) for t in texts)
        or not isinstance(at, datetime)
        or at.tzinfo is None
        or not isinstance(count, int)
        or not isinstance(done, bool)
        or not (reason is None or isinstance(reason, str))
    ):
        return None
    id_, who, what, endpoint, selector = (str(t) for t in texts)
    return Action(id_, at, who, what, endpoint, selector, reason, count, done)
