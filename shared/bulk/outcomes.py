"""What a task says about each row it handled: one outcome row per input row."""

from __future__ import annotations

from typing import Literal

Status = Literal["sent", "deduplicated", "rejected", "not_waiting", "uncertain"]
STATUSES: tuple[Status, ...] = ("sent", "deduplicated", "rejected", "not_waiting", "uncertain")
"""``sent``: a new message (or, for a replay, a poisoned message sent back to its queue);
``deduplicated``: sent by an earlier attempt or run, nothing new sent; ``rejected``: failed a
check, with its reason; ``not_waiting`` (replay): the selected message is not in its poison
queue (replayed by an earlier run, or never parked); ``uncertain`` (replay): taken from its
poison queue in a run that had to leave some of the messages it took there (a damaged entry, a
parked original missing or altered), and which ones is not known: it was either sent back or
is still parked. The reason says what was left and why; a run again sends what still waits."""

OUTCOME_COLUMNS = ("row_key", "idempotency_key", "status", "reason", "message_ids", "row")
"""``row`` (the input row as JSON) is kept for rejected rows only."""

Outcome = tuple[str | None, str | None, Status, str | None, list[str], str | None]
