"""The delayed messages the console lists, with the type and destination their tokens hold.

Tokens are tallied by sender, as the cleanup's backlog tallies them for the alerts
(``shared.cleanup.backlog.tokens_in_flight``): a token names its sender
(``{sender}/{incoming id}/{attempt id}/{message id}/{digest}``), not its destination, so
counting by sender costs one listing of the tokens container, whereas the destination would
cost a read per token. Only the soonest few delayed messages are read, for their type and
destination.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.bus.envelope import Envelope
from shared.cleanup.backlog import Due
from shared.errors import NotFound
from shared.stores.blob import BlobContainer


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
