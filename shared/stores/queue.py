"""Queue interface: the signalling channel of the protocol (Azure Storage Queue semantics)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime

from shared.errors import TooLarge
from shared.stores.names import MAX_QUEUE_MESSAGE_BYTES

DEFAULT_VISIBILITY_TIMEOUT = 30.0
MAX_VISIBILITY_TIMEOUT = 7 * 24 * 3600.0
MAX_RECEIVE_BATCH = 32


@dataclass(frozen=True)
class QueueMessage:
    """A received message. ``pop_receipt`` proves the holder's lease on it."""

    id: str
    content: str
    dequeue_count: int
    pop_receipt: str
    inserted_on: datetime
    next_visible_on: datetime
    expires_on: datetime | None = None
    """When the service drops it unread; None for a message sent with no expiry
    (``time_to_live=-1``)."""


def encoded_size(content: str) -> int:
    """Size of the message on the wire: base64 of its UTF-8 bytes, as the Functions host expects."""
    raw = len(content.encode("utf-8"))
    return 4 * ((raw + 2) // 3)


def check_message_size(content: str) -> None:
    """Refuse a message that Azure would reject (64 KiB encoded, about 48 KiB of raw bytes)."""
    size = encoded_size(content)
    if size > MAX_QUEUE_MESSAGE_BYTES:
        raise TooLarge(
            f"queue message is {size} bytes base64-encoded; the limit is "
            f"{MAX_QUEUE_MESSAGE_BYTES} (about 48 KiB of raw UTF-8)"
        )


class MessageQueue(abc.ABC):
    """One storage queue with at-least-once delivery and no ordering guarantee.

    Messages are text; adapters base64-encode them on the wire like the Functions host does.
    Times are in seconds.
    """

    name: str

    @abc.abstractmethod
    async def create_if_missing(self) -> None:
        """Create the queue; do nothing if it exists."""

    @abc.abstractmethod
    async def delete_queue(self) -> None:
        """Delete the queue and its messages; do nothing if it is absent."""

    @abc.abstractmethod
    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        """Enqueue a message and return its id.

        ``visibility_delay`` hides it for that long first; ``time_to_live`` (default: 7 days,
        ``-1`` for never) drops it unread after that long. Raises TooLarge above 64 KiB encoded,
        NotFound when the queue does not exist.
        """

    @abc.abstractmethod
    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    ) -> list[QueueMessage]:
        """Take up to ``max_messages`` (1-32) visible messages and hide them for
        ``visibility_timeout``; each one's dequeue count goes up by one and gets a new pop
        receipt. A message reappears when the timeout passes unless it was deleted."""

    @abc.abstractmethod
    async def delete(self, message_id: str, pop_receipt: str) -> None:
        """Delete a received message. Raises NotFound when the message is gone or the pop
        receipt is no longer current (someone else received it since)."""

    @abc.abstractmethod
    async def update(
        self,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_timeout: float,
        content: str | None = None,
    ) -> str:
        """Change a received message's visibility (and optionally its content); returns the new
        pop receipt. Raises NotFound when the pop receipt is no longer current."""

    @abc.abstractmethod
    async def peek(self, max_messages: int = 32) -> list[QueueMessage]:
        """Look at visible messages without receiving them (pop receipts are empty). Each
        says when it expires (``QueueMessage.expires_on``), as a received one does."""

    @abc.abstractmethod
    async def approximate_count(self) -> int:
        """Number of messages in the queue, visible or not (an estimate on Azure)."""

    @abc.abstractmethod
    async def clear(self) -> None:
        """Delete every message."""
