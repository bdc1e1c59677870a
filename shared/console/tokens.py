"""Tokens in flight and delayed messages, by the endpoint that sent them, from one listing.

A token names its sender (``{sender}/{incoming id}/{attempt id}/{message id}/{digest}``), not
its destination: counting by sender costs one listing of the tokens container, whereas the
destination would cost a read per token. A token's age counts from its last change, or for a
delayed message from its due time (``shared.cleanup.tasks.since``): a message due next week is
not late. A token whose metadata holds a due time still to come is a delayed message; only
the soonest few are read, for their type and destination.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from shared.bus.envelope import TOKEN_NAME, Envelope
from shared.bus.outgoing import DUE_METADATA
from shared.bus.unsubscribed import parse_time
from shared.cleanup.tasks import since
from shared.errors import NotFound
from shared.stores.blob import BlobContainer, BlobProperties

NEXT_DUE = 5
"""Delayed messages listed per sender, soonest first."""


@dataclass(frozen=True)
class Due:
    token: str
    message_id: str
    due_at: datetime


@dataclass
class SenderTokens:
    """The tokens one sender has in flight."""

    count: int = 0
    oldest: datetime | None = None
    """Since when the oldest one that is due has waited (None: none is due)."""
    delayed: int = 0
    soonest: list[tuple[float, str, str, datetime]] = field(default_factory=list)
    """The soonest ``NEXT_DUE`` delayed ones, (minus due timestamp, token, message id, due
    time): a heap whose top is the latest of them, dropped when a sooner one comes."""

    def add(self, blob: BlobProperties, now: datetime) -> None:
        self.count += 1
        due = parse_time(blob.metadata, DUE_METADATA)
        if due is not None and due > now:
            self.delayed += 1
            named = TOKEN_NAME.fullmatch(blob.name)
            entry = (-due.timestamp(), blob.name, named["out"] if named else "", due)
            if len(self.soonest) < NEXT_DUE:
                heapq.heappush(self.soonest, entry)
            else:
                heapq.heappushpop(self.soonest, entry)
            return
        waited_since = since(blob)
        if self.oldest is None or waited_since < self.oldest:
            self.oldest = waited_since

    def next_due(self) -> list[Due]:
        return [Due(token, mid, at) for _, token, mid, at in sorted(self.soonest, reverse=True)]


async def tokens_by_sender(tokens: BlobContainer, now: datetime) -> dict[str, SenderTokens]:
    """Every token in flight, counted by its sender (the first part of its name)."""
    senders: dict[str, SenderTokens] = defaultdict(SenderTokens)
    async for blob in tokens.list():
        senders[blob.name.split("/", 1)[0]].add(blob, now)
    return dict(senders)


@dataclass(frozen=True)
class DueMessage:
    message_id: str
    type: str | None
    destination: str | None
    due_at: datetime


async def described(tokens: BlobContainer, due: Due) -> DueMessage:
    """A delayed message with the type and destination its token holds (None where the token
    is gone since the listing, or holds no envelope)."""
    try:
        envelope = Envelope.from_bytes((await tokens.read(due.token)).data)
    except (NotFound, ValueError):
        return DueMessage(due.message_id, None, None, due.due_at)
    return DueMessage(due.message_id, envelope.type, envelope.destination, due.due_at)
