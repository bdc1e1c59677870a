"""Queue over the async Azure Storage Queue SDK, base64-encoded like the Functions host."""

from __future__ import annotations

import base64
import math
from datetime import UTC, datetime

from azure.storage.queue import QueueMessage as SdkQueueMessage
from azure.storage.queue.aio import QueueClient

from shared.errors import AlreadyExists, InvalidValue, NotFound
from shared.stores.azure.errors import bounded
from shared.stores.queue import (
    MAX_RECEIVE_BATCH,
    MAX_VISIBILITY_TIMEOUT,
    MessageQueue,
    QueueMessage,
    check_message_size,
)


def encode(content: str) -> str:
    return base64.b64encode(content.encode("utf-8")).decode("ascii")


def decode(wire: str) -> str:
    """Decode a base64 body; a body that is not base64 (sent by another tool) is returned as
    it is, so the receiver can reject it as malformed instead of the whole receive failing."""
    try:
        return base64.b64decode(wire, validate=True).decode("utf-8")
    except ValueError:  # not base64 (binascii.Error), non-ASCII text, or bytes not UTF-8
        return wire


def _seconds(value: float) -> int:
    # The service takes whole seconds; round up so a message is never visible early.
    return math.ceil(value)


NEVER_EXPIRES_YEAR = 9999
"""The service reports a message sent with ``time_to_live=-1`` as expiring on 31 December 9999."""


def _expiry(moment: datetime | None) -> datetime | None:
    if moment is None or moment.year >= NEVER_EXPIRES_YEAR:
        return None
    return moment


def _message(message: SdkQueueMessage) -> QueueMessage:
    now = datetime.now(UTC)
    return QueueMessage(
        id=message.id,
        content=decode(message.content or ""),
        dequeue_count=message.dequeue_count or 0,
        pop_receipt=message.pop_receipt or "",
        inserted_on=message.inserted_on or now,
        next_visible_on=message.next_visible_on or now,
        expires_on=_expiry(message.expires_on),
    )


class AzureQueue(MessageQueue):
    def __init__(self, client: QueueClient, call_seconds: float) -> None:
        self._client = client
        self._seconds = call_seconds
        self.name = client.queue_name

    def _what(self) -> str:
        return f"queue {self.name}"

    async def create_if_missing(self) -> None:
        try:
            async with bounded(self._what(), self._seconds):
                await self._client.create_queue()
        except AlreadyExists:
            pass

    async def delete_queue(self) -> None:
        try:
            async with bounded(self._what(), self._seconds):
                await self._client.delete_queue()
        except NotFound:
            pass

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        check_message_size(content)
        if not 0 <= visibility_delay <= MAX_VISIBILITY_TIMEOUT:
            raise InvalidValue("visibility_delay must be between 0 and 7 days")
        if time_to_live is not None and time_to_live != -1:
            if time_to_live < 1:
                raise InvalidValue("time_to_live must be at least 1 second, or -1 for never")
            if visibility_delay >= time_to_live:
                raise InvalidValue("visibility_delay must be shorter than time_to_live")
        async with bounded(self._what(), self._seconds):
            sent = await self._client.send_message(
                encode(content),
                visibility_timeout=_seconds(visibility_delay) or None,
                time_to_live=None if time_to_live is None else _seconds(time_to_live),
            )
        return str(sent.id)

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        if not 1 <= max_messages <= MAX_RECEIVE_BATCH:
            raise InvalidValue(f"max_messages must be 1-{MAX_RECEIVE_BATCH}")
        if not 1 <= visibility_timeout <= MAX_VISIBILITY_TIMEOUT:
            raise InvalidValue("visibility_timeout must be between 1 second and 7 days")
        received: list[QueueMessage] = []
        async with bounded(self._what(), self._seconds):
            pages = self._client.receive_messages(
                messages_per_page=max_messages,
                max_messages=max_messages,
                visibility_timeout=_seconds(visibility_timeout),
            )
            async for message in pages:
                received.append(_message(message))
        return received

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        async with bounded(f"message {message_id} in {self._what()}", self._seconds):
            await self._client.delete_message(message_id, pop_receipt)

    async def update(
        self,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_timeout: float,
        content: str | None = None,
    ) -> str:
        if not 0 <= visibility_timeout <= MAX_VISIBILITY_TIMEOUT:
            raise InvalidValue("visibility_timeout must be between 0 and 7 days")
        if content is not None:
            check_message_size(content)
        async with bounded(f"message {message_id} in {self._what()}", self._seconds):
            updated = await self._client.update_message(
                message_id,
                pop_receipt,
                content=None if content is None else encode(content),
                visibility_timeout=_seconds(visibility_timeout),
            )
        return str(updated.pop_receipt)

    async def peek(self, max_messages: int = 32) -> list[QueueMessage]:
        if not 1 <= max_messages <= MAX_RECEIVE_BATCH:
            raise InvalidValue(f"max_messages must be 1-{MAX_RECEIVE_BATCH}")
        async with bounded(self._what(), self._seconds):
            peeked = await self._client.peek_messages(max_messages=max_messages)
        return [_message(m) for m in peeked]

    async def approximate_count(self) -> int:
        async with bounded(self._what(), self._seconds):
            properties = await self._client.get_queue_properties()
        return int(properties.approximate_message_count or 0)

    async def clear(self) -> None:
        async with bounded(self._what(), self._seconds):
            await self._client.clear_messages()
