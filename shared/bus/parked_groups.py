"""What one parked message says about itself, and parked messages grouped by why they failed:
the rows of ``bus poison list`` (and ``--group``) and of the console's failed messages."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from shared.bus.poison import read_poison
from shared.stores.queue import QueueMessage

GROUP_KEYS = ("endpoint", "message_type", "error_type")


def parked_entry(endpoint: str, message: QueueMessage) -> dict[str, Any]:
    """``message`` of ``endpoint``'s poison queue as listed: what its content says
    (``read_poison``, nothing trusted), the queue it is in and when it was parked."""
    return {
        **read_poison(message.content).to_json(),
        "endpoint": endpoint,  # the queue it is in, whatever it claims
        "queue_message_id": message.id,
        "parked_at": message.inserted_on.astimezone(UTC).isoformat(timespec="seconds"),
    }


def poison_groups(listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The listed messages counted by endpoint, message type and error type, largest group
    first; each group keeps its first message's reason as an example."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for item in listed:
        key = tuple(item[k] for k in GROUP_KEYS)
        group = groups.setdefault(
            key,
            dict(zip(GROUP_KEYS, key, strict=True), count=0, example_reason=item["reason"]),
        )
        group["count"] += 1
    return sorted(groups.values(), key=lambda g: (-g["count"], str(g["endpoint"])))
