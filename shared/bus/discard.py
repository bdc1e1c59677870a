"""Discarding a parked message: archived with who, when and why, then deleted.

The archive entry is written before the poison message is deleted, so a crash between the
two leaves the message in both places, never in neither. Its name is the poison queue
message's (``<endpoint>/<queue message id>``), created only if absent: a second discard of
the same message (after such a crash) finds the entry, keeps the first one's record, and
finishes by deleting the poison message. The entry holds the content as it was parked; its
``keep_until`` metadata says when the retention ends (docs/console.md).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.bus.poison import PassedOver, read_poison
from shared.bus.poison_view import LOOK_SECONDS, PEEK_LIMIT
from shared.errors import AlreadyExists, NotFound
from shared.stores.blob import BlobContainer
from shared.stores.queue import MessageQueue, QueueMessage

MAX_REASON_CHARS = 2000
MAX_BY_CHARS = 200


@dataclass(frozen=True)
class Discard:
    """Who discards, why, and for how long the archive keeps what they discarded."""

    reason: str
    by: str
    at: datetime
    retention: timedelta

    def __post_init__(self) -> None:
        if not self.reason.strip() or len(self.reason) > MAX_REASON_CHARS:
            raise ValueError(f"a discard needs a reason of 1 to {MAX_REASON_CHARS} characters")
        if not self.by.strip() or len(self.by) > MAX_BY_CHARS:
            raise ValueError(f"a discard names who discards it, 1 to {MAX_BY_CHARS} characters")


@dataclass(frozen=True)
class Discarded:
    endpoint: str
    queue_message_id: str
    message_id: str | None
    archived_as: str
    already_archived: bool
    """An earlier discard of it archived it and stopped before the delete."""


def archive_name(endpoint: str, queue_message_id: str) -> str:
    return f"{endpoint}/{queue_message_id}"


@dataclass(frozen=True)
class DiscardFilter:
    """Which poison messages a discard takes: those matching every criterion given."""

    message_id: str | None = None
    """A bus message id, or a queue message id."""
    message_type: str | None = None
    error_type: str | None = None

    def __post_init__(self) -> None:
        if self.message_id is None and self.message_type is None and self.error_type is None:
            raise ValueError("a discard names a message id, a message type or an error type")

    def __call__(self, message: QueueMessage) -> bool:
        record = read_poison(message.content)
        return (
            (self.message_id is None or self.message_id in (message.id, record.message_id))
            and (self.message_type is None or record.message_type == self.message_type)
            and (self.error_type is None or record.error_type == self.error_type)
        )


async def discard_parked(
    poison: MessageQueue,
    endpoint: str,
    select: Callable[[QueueMessage], bool],
    archive: BlobContainer,
    discard: Discard,
) -> list[Discarded]:
    """Archive, then delete, every poison message of ``endpoint`` that ``select`` takes (a
    ``DiscardFilter``, or the console's selection); the rest of the queue is looked at and
    left visible."""
    passed = PassedOver()
    done: list[Discarded] = []
    try:
        while batch := passed.unseen(
            await poison.receive(PEEK_LIMIT, visibility_timeout=LOOK_SECONDS)
        ):
            for message in batch:
                if select(message):
                    done.append(await _discard_one(poison, endpoint, message, archive, discard))
                else:
                    passed.hold(message)
    finally:
        await passed.release(poison)
    return done


async def _discard_one(
    poison: MessageQueue,
    endpoint: str,
    message: QueueMessage,
    archive: BlobContainer,
    discard: Discard,
) -> Discarded:
    name = archive_name(endpoint, message.id)
    already = False
    try:
        await archive.create(name, _entry(endpoint, message, discard), _metadata(discard))
    except AlreadyExists:
        already = True  # archived by a discard that stopped before its delete: keep its record
    with contextlib.suppress(NotFound):  # taken by someone else since: it is archived anyway
        await poison.delete(message.id, message.pop_receipt)
    return Discarded(endpoint, message.id, read_poison(message.content).message_id, name, already)


def _entry(endpoint: str, message: QueueMessage, discard: Discard) -> bytes:
    record = {
        "endpoint": endpoint,
        "queue_message_id": message.id,
        "parked_at": message.inserted_on.astimezone(UTC).isoformat(),
        "content": message.content,
        "reason": discard.reason,
        "by": discard.by,
        "at": discard.at.astimezone(UTC).isoformat(),
        "keep_until": (discard.at + discard.retention).astimezone(UTC).isoformat(),
    }
    return json.dumps(record, ensure_ascii=True).encode("ascii")


def _metadata(discard: Discard) -> dict[str, str]:
    """ASCII only (blob metadata): the cleanup reads when the entry may go without its body."""
    keep_until = (discard.at + discard.retention).astimezone(UTC)
    return {"keep_until": keep_until.isoformat(timespec="seconds")}
