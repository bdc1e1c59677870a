"""Discarding a parked message: archived with who, when and why, then its token and the
poison message deleted.

The archive entry is written first, then the message's token is deleted (when it proves to
be that message's: ``shared.bus.discard_token``), then the poison message: a crash between
any two leaves the message in the archive and still parked, never in neither. The entry's
name is the poison queue message's (``<endpoint>/<queue message id>``), created only if
absent: a second discard of the same message (after such a crash) finds the entry, keeps the
first one's record, and finishes the deletes. The entry holds the content as it was parked
and the token's envelope, so the token can go: the backlog's oldest token clears, and the
origin record that committed it retires as the cleanup retires it after any processed
message. Its ``keep_until`` metadata says when the retention ends (docs/console.md).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.bus.config import BusConfig
from shared.bus.discard_token import parked_token, remove_token
from shared.bus.parked_pass import walk
from shared.bus.poison import read_poison
from shared.errors import AlreadyExists, NotFound
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.queue import MessageQueue, QueueMessage

KEEP_UNTIL = "keep_until"
"""The archive entry's metadata key: until when it is kept (``shared.cleanup.discarded``)."""
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
    token_removed: bool = False
    """Its token was deleted (False: it had none, it was gone, or it is not this message's)."""


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


@dataclass(frozen=True)
class DiscardPlaces:
    """Where a discard reads and writes besides the poison queue."""

    archive: BlobContainer
    tokens: BlobContainer
    parked: BlobContainer
    """The parked-originals container: a poison message by reference keeps its signal there."""

    @classmethod
    def of(cls, account: StorageAccount, config: BusConfig) -> DiscardPlaces:
        """The containers ``config`` names in ``account``."""
        return cls(
            archive=account.blob_container(config.discarded_container),
            tokens=account.blob_container(config.tokens_container),
            parked=account.blob_container(config.parked_container),
        )


@dataclass(frozen=True)
class DiscardReport:
    discarded: list[Discarded]
    complete: bool
    """The pass looked at every message of the queue; false when it stopped before the end
    (its look limit or its time: ``shared.bus.parked_pass``), and a discard again takes
    what it did not reach."""


async def discard_parked(
    poison: MessageQueue,
    endpoint: str,
    select: Callable[[QueueMessage], bool],
    places: DiscardPlaces,
    discard: Discard,
    *,
    look_limit: int | None = None,
) -> DiscardReport:
    """Archive every poison message of ``endpoint`` that ``select`` takes (a
    ``DiscardFilter``, or the console's selection), then delete its token and it; the rest
    of the queue is looked at and left visible. One pass (``shared.bus.parked_pass.walk``)
    looks at each message once, at most ``look_limit`` of them (None: as many as its time
    allows), and ends on an exhausted queue."""
    done: list[Discarded] = []

    async def visit(message: QueueMessage) -> bool:
        if not select(message):
            return False
        done.append(await _discard_one(poison, endpoint, message, places, discard))
        return True

    complete = await walk(poison, visit, limit=look_limit)
    return DiscardReport(done, complete)


async def _discard_one(
    poison: MessageQueue,
    endpoint: str,
    message: QueueMessage,
    places: DiscardPlaces,
    discard: Discard,
) -> Discarded:
    name = archive_name(endpoint, message.id)
    token = await parked_token(message.content, endpoint, places.tokens, places.parked)
    envelope = None if token is None else token.envelope
    already = False
    try:
        await places.archive.create(
            name, _entry(endpoint, message, discard, envelope), _metadata(discard)
        )
    except AlreadyExists:
        already = True  # archived by a discard that stopped before its deletes: keep its record
        if token is not None and await _archived_envelope(places.archive, name) != envelope:
            token = None  # an entry without this envelope (written before discards kept one)
    removed = token is not None and await remove_token(places.tokens, token)
    with contextlib.suppress(NotFound):  # taken by someone else since: it is archived anyway
        await poison.delete(message.id, message.pop_receipt)
    message_id = read_poison(message.content).message_id
    return Discarded(endpoint, message.id, message_id, name, already, removed)


async def _archived_envelope(archive: BlobContainer, name: str) -> str | None:
    """The envelope an archive entry keeps, if it keeps one."""
    try:
        entry = json.loads((await archive.read(name)).data)
    except (NotFound, ValueError, RecursionError):
        return None
    envelope = entry.get("envelope") if isinstance(entry, dict) else None
    return envelope if isinstance(envelope, str) else None


def _entry(endpoint: str, message: QueueMessage, discard: Discard, envelope: str | None) -> bytes:
    record = {
        "endpoint": endpoint,
        "queue_message_id": message.id,
        "parked_at": message.inserted_on.astimezone(UTC).isoformat(),
        "content": message.content,
        "envelope": envelope,
        "reason": discard.reason,
        "by": discard.by,
        "at": discard.at.astimezone(UTC).isoformat(),
        "keep_until": (discard.at + discard.retention).astimezone(UTC).isoformat(),
    }
    return json.dumps(record, ensure_ascii=True).encode("ascii")


def _metadata(discard: Discard) -> dict[str, str]:
    """ASCII only (blob metadata): the cleanup reads when the entry may go without its body."""
    keep_until = (discard.at + discard.retention).astimezone(UTC)
    return {KEEP_UNTIL: keep_until.isoformat(timespec="seconds")}
