"""In-memory queue with Storage Queue semantics: visibility timeouts, dequeue counts, pop
receipts, time-to-live, and no ordering promise beyond "roughly oldest first"."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, replace

from shared.clock import to_datetime
from shared.errors import InvalidValue, NotFound
from shared.stores.memory.state import MemoryState
from shared.stores.queue import (
    MAX_RECEIVE_BATCH,
    MAX_VISIBILITY_TIMEOUT,
    MessageQueue,
    QueueMessage,
    check_message_size,
)

DEFAULT_TIME_TO_LIVE = 7 * 24 * 3600.0
_sequence = itertools.count()


@dataclass(frozen=True)
class _Stored:
    sequence: int
    content: str
    inserted: float
    expires: float | None
    visible_at: float
    dequeue_count: int = 0
    pop_receipt: str = ""


def _check_visibility(seconds: float, what: str) -> None:
    if not 0 <= seconds <= MAX_VISIBILITY_TIMEOUT:
        raise InvalidValue(f"{what} must be between 0 and 7 days, got {seconds}")


class MemoryQueue(MessageQueue):
    def __init__(self, state: MemoryState, name: str) -> None:
        self._state = state
        self.name = name

    def _messages(self) -> dict[str, _Stored]:
        try:
            messages: dict[str, _Stored] = self._state.queues[self.name]
        except KeyError:
            raise NotFound(f"queue {self.name!r} does not exist") from None
        now = self._state.clock()
        for message_id in [
            k for k, m in messages.items() if m.expires is not None and m.expires <= now
        ]:
            del messages[message_id]
        return messages

    def _view(self, message_id: str, stored: _Stored, pop_receipt: str) -> QueueMessage:
        return QueueMessage(
            id=message_id,
            content=stored.content,
            dequeue_count=stored.dequeue_count,
            pop_receipt=pop_receipt,
            inserted_on=to_datetime(stored.inserted),
            next_visible_on=to_datetime(stored.visible_at),
            expires_on=None if stored.expires is None else to_datetime(stored.expires),
        )

    async def create_if_missing(self) -> None:
        with self._state.lock:
            self._state.queues.setdefault(self.name, {})

    async def delete_queue(self) -> None:
        with self._state.lock:
            self._state.queues.pop(self.name, None)

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        check_message_size(content)
        _check_visibility(visibility_delay, "visibility_delay")
        ttl = DEFAULT_TIME_TO_LIVE if time_to_live is None else time_to_live
        if ttl != -1 and ttl < 1:
            raise InvalidValue("time_to_live must be at least 1 second, or -1 for never")
        if ttl != -1 and visibility_delay >= ttl:
            raise InvalidValue("visibility_delay must be shorter than time_to_live")
        with self._state.lock:
            messages = self._messages()
            now = self._state.clock()
            message_id = str(uuid.uuid4())
            messages[message_id] = _Stored(
                sequence=next(_sequence),
                content=content,
                inserted=now,
                expires=None if ttl == -1 else now + ttl,
                visible_at=now + visibility_delay,
            )
            return message_id

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        if not 1 <= max_messages <= MAX_RECEIVE_BATCH:
            raise InvalidValue(f"max_messages must be 1-{MAX_RECEIVE_BATCH}")
        if not 1 <= visibility_timeout <= MAX_VISIBILITY_TIMEOUT:
            raise InvalidValue("visibility_timeout must be between 1 second and 7 days")
        with self._state.lock:
            messages = self._messages()
            now = self._state.clock()
            visible = sorted((m.sequence, k) for k, m in messages.items() if m.visible_at <= now)[
                :max_messages
            ]
            received = []
            for _, message_id in visible:
                stored = replace(
                    messages[message_id],
                    visible_at=now + visibility_timeout,
                    dequeue_count=messages[message_id].dequeue_count + 1,
                    pop_receipt=str(uuid.uuid4()),
                )
                messages[message_id] = stored
                received.append(self._view(message_id, stored, stored.pop_receipt))
            return received

    def _leased(self, message_id: str, pop_receipt: str) -> _Stored:
        stored = self._messages().get(message_id)
        if stored is None:
            raise NotFound(f"message {message_id} is not in queue {self.name}")
        if not pop_receipt or stored.pop_receipt != pop_receipt:
            raise NotFound(
                f"pop receipt of message {message_id} is not current (received again since)"
            )
        return stored

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        with self._state.lock:
            self._leased(message_id, pop_receipt)
            del self._messages()[message_id]

    async def update(
        self,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_timeout: float,
        content: str | None = None,
    ) -> str:
        _check_visibility(visibility_timeout, "visibility_timeout")
        if content is not None:
            check_message_size(content)
        with self._state.lock:
            stored = self._leased(message_id, pop_receipt)
            now = self._state.clock()
            updated = replace(
                stored,
                content=stored.content if content is None else content,
                visible_at=now + visibility_timeout,
                pop_receipt=str(uuid.uuid4()),
            )
            self._messages()[message_id] = updated
            return updated.pop_receipt

    async def peek(self, max_messages: int = 32) -> list[QueueMessage]:
        if not 1 <= max_messages <= MAX_RECEIVE_BATCH:
            raise InvalidValue(f"max_messages must be 1-{MAX_RECEIVE_BATCH}")
        with self._state.lock:
            now = self._state.clock()
            visible = sorted(
                (m.sequence, k, m) for k, m in self._messages().items() if m.visible_at <= now
            )[:max_messages]
            # A peek holds no lease: its messages carry no pop receipt.
            return [self._view(k, m, "") for _, k, m in visible]

    async def approximate_count(self) -> int:
        with self._state.lock:
            return len(self._messages())

    async def clear(self) -> None:
        with self._state.lock:
            self._messages().clear()
