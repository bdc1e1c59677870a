"""What a poison message says about itself, for ``bus poison list`` and replay's filters.

A poison message is either a JSON wrapper ``{"poison": {...why...}, "signal": raw, ...}``
written by the pipeline, or the raw signal moved by the Functions host after
``maxDequeueCount`` failures (see ``shared.bus.poison``). Its content came from a queue, so
nothing in it is trusted: every field is optional, only text and numbers are read, and text
is cut to a bounded length. Whatever cannot be read is left out, never an error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

MAX_FIELD_CHARS = 2000
HOST_MOVED = "failed maxDequeueCount times (moved by the host)"


@dataclass(frozen=True)
class PoisonRecord:
    reason: str
    endpoint: str | None = None
    message_type: str | None = None
    message_id: str | None = None
    dequeue_count: int | None = None
    first_failure: str | None = None
    last_failure: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_poison(body: str) -> PoisonRecord:
    """The record of one poison message's content, as far as the content says."""
    data = _json(body) or {}
    info = data.get("poison")
    if not isinstance(info, dict):
        return _from_signal(body, HOST_MOVED)
    found = info.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    signal = _from_signal(data.get("signal"), "")
    return PoisonRecord(
        reason=_text(info.get("reason")) or _text(error.get("message")) or "",
        endpoint=_text(info.get("endpoint")) or _text(error.get("endpoint")),
        message_type=_first_text(info, error, "message_type", "type") or signal.message_type,
        message_id=_first_text(info, error, "message_id", "id") or signal.message_id,
        dequeue_count=_count(info.get("dequeue_count")),
        first_failure=_text(info.get("first_failure")),
        last_failure=_text(info.get("last_failure")),
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
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _first_text(info: dict[str, Any], error: dict[str, Any], *names: str) -> str | None:
    for source in (info, error):
        for name in names:
            found = _text(source.get(name))
            if found:
                return found
    return None


def _text(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return str(value)[:MAX_FIELD_CHARS]


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
