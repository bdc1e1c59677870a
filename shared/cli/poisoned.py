"""What a poison message says about itself, for ``bus poison list`` and replay's filters.

A poison message takes one of the forms ``shared.bus.poison`` writes and replays: the
pipeline's or the local host's wrapper ``{"poison": {...why...}, "signal": raw}`` (the why
is ``Reason.as_json``: endpoint, reason, dequeue_count, error_type, message_id,
message_type, enqueued_at, failed_at), the same wrapper without the signal and with
``original`` naming the blob that keeps a message too large to park beside its reason, or
the raw signal moved by the Functions host after ``maxDequeueCount`` failures. Its content
came from a queue, so nothing in it is trusted: every field is optional, only text, numbers
and times with a zone are read, and text is cut to a bounded length. Whatever cannot be read
is left out, never an error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from shared.bus.poison import HOST_MOVED_REASON, MAX_REASON_CHARS

MAX_FIELD_CHARS = MAX_REASON_CHARS


@dataclass(frozen=True)
class PoisonRecord:
    reason: str
    endpoint: str | None = None
    message_type: str | None = None
    message_id: str | None = None
    dequeue_count: int | None = None
    """Deliveries tried before it was parked, as the wrapper says (the host's move says none)."""
    error_type: str | None = None
    original: str | None = None
    """The parked-originals blob holding the message, when it was parked by reference."""
    enqueued_at: str | None = None
    """When its queue message was inserted: its first try followed (``Reason``)."""
    failed_at: str | None = None
    """When the failure that parked it happened: the last failure."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_poison(body: str) -> PoisonRecord:
    """The record of one poison message's content, as far as the content says."""
    data = _json(body) or {}
    info = data.get("poison")
    if not isinstance(info, dict):
        return _from_signal(body, HOST_MOVED_REASON)
    signal = _from_signal(data.get("signal"), "")
    return PoisonRecord(
        reason=_text(info.get("reason")) or "",
        endpoint=_text(info.get("endpoint")),
        message_type=_text(info.get("message_type")) or signal.message_type,
        message_id=_text(info.get("message_id")) or signal.message_id,
        dequeue_count=_count(info.get("dequeue_count")),
        error_type=_text(info.get("error_type")),
        original=_text(info.get("original")),
        enqueued_at=_time(info.get("enqueued_at")),
        failed_at=_time(info.get("failed_at")),
    )


def _from_signal(raw: object, reason: str) -> PoisonRecord:
    """A raw signal names its message id; the envelope copy it may carry names the type."""
    signal = _json(raw) if isinstance(raw, str) else None
    if signal is None:
        return PoisonRecord(reason)
    envelope = _json(signal.get("envelope"))
    return PoisonRecord(
        reason,
        message_id=_text(signal.get("message_id")),
        message_type=None if envelope is None else _text(envelope.get("type")),
    )


def _json(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # nested deeper than the parser goes
        return None
    return value if isinstance(value, dict) else None


def _text(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return str(value)[:MAX_FIELD_CHARS] or None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: object) -> str | None:
    """An ISO 8601 time with its zone, in UTC to the second; anything else (no zone, not a
    time, out of range once in UTC) is left out."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            return None
        return moment.astimezone(UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError):
        return None
