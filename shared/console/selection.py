"""Which parked messages an action takes, as the console's requests name them.

``{"endpoint": E, "ids": [queue message ids]}`` takes those messages; ``{"endpoint": E,
"type": T, "error_type": X}`` takes a group as ``GET /api/failed/groups`` counts it, where a
key given as null matches the messages that have none and a key left out matches any (at
least one of the two is given: an action never takes a whole queue by omission). Everything
in a request is checked before anything reaches storage: an endpoint of the app, ids that
look like queue message ids, bounded texts, no other keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.bus.poison import read_poison
from shared.console.guard import Refused
from shared.stores.queue import QueueMessage

QUEUE_MESSAGE_ID = re.compile(r"[A-Za-z0-9-]{1,100}")
"""What a queue message id looks like (a GUID in Azure and Azurite): anything else is
refused before it reaches storage."""
MAX_IDS = 1000
MAX_TEXT_CHARS = 2000
ANY = object()
"""A criterion left out: every value matches."""


@dataclass(frozen=True)
class Selection:
    endpoint: str
    ids: frozenset[str] | None = None
    message_type: object = ANY
    """A type name, None (messages without one) or ``ANY``."""
    error_type: object = ANY

    def matches(self, message: QueueMessage) -> bool:
        return (self.ids is None or message.id in self.ids) and self.matches_content(
            message.content
        )

    def matches_content(self, content: str) -> bool:
        if self.message_type is ANY and self.error_type is ANY:
            return True
        record = read_poison(content)
        return (self.message_type is ANY or record.message_type == self.message_type) and (
            self.error_type is ANY or record.error_type == self.error_type
        )

    def described(self) -> str:
        """The selection as the action journal keeps it."""
        parts = []
        if self.ids is not None:
            parts.append("ids " + ", ".join(sorted(self.ids)))
        for label, value in (("type", self.message_type), ("error type", self.error_type)):
            if value is not ANY:
                parts.append(f"{label} {'(none)' if value is None else value}")
        return "; ".join(parts)


def parse_selection(
    body: dict[str, Any], endpoints: list[str], *, extra: tuple[str, ...] = ()
) -> Selection:
    """The selection a request's JSON object names; Refused (400, or 404 for an endpoint
    the app does not have) when it is not one."""
    unknown = sorted(set(body) - {"endpoint", "ids", "type", "error_type", *extra})
    if unknown:
        raise Refused(400, f"unknown fields {unknown}")
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or endpoint not in endpoints:
        raise Refused(404, "no such endpoint in this app")
    has_ids = "ids" in body
    if has_ids == ("type" in body or "error_type" in body):
        raise Refused(400, "name either ids, or a type and/or an error_type (null: none)")
    if has_ids:
        return Selection(endpoint, ids=_ids(body["ids"]))
    return Selection(
        endpoint,
        message_type=_criterion(body, "type"),
        error_type=_criterion(body, "error_type"),
    )


def _ids(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_IDS:
        raise Refused(400, f"ids is a list of 1 to {MAX_IDS} queue message ids")
    if not all(isinstance(i, str) and QUEUE_MESSAGE_ID.fullmatch(i) for i in value):
        raise Refused(400, "ids holds something that is not a queue message id")
    return frozenset(value)


def _criterion(body: dict[str, Any], key: str) -> object:
    if key not in body:
        return ANY
    value = body[key]
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TEXT_CHARS:
        raise Refused(400, f"{key} is null or a text of 1 to {MAX_TEXT_CHARS} characters")
    return value


def text_field(body: dict[str, Any], key: str, *, limit: int) -> str:
    """A required, non-blank text of at most ``limit`` characters."""
    value = body.get(key)
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise Refused(400, f"{key} is required: a text of 1 to {limit} characters")
    return value
