"""Handles of sent messages, and the built-in command that cancels one (issue 46).

``ctx.send`` returns a ``MessageHandle``: everything needed to find the message's token
later, which a handler may keep in its state. ``ctx.cancel(handle)`` sends a
``CancelScheduled`` to the message's endpoint, in its partition, committed with the handler's
other outputs; that endpoint's pipeline carries it out itself (``shared.bus.cancel``), with no
user handler. Its type name holds a dot, which no class name (and so no user type) can.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from shared.bus.messages import Command

_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_ENDPOINT = r"^[a-z][a-z0-9]{2,39}$"
"""An endpoint's name as token names hold it (``shared.bus.envelope.TOKEN_NAME``)."""
MAX_PARTITION_CHARS = 1024

CANCEL_TYPE = "bus.CancelScheduled"
"""The built-in cancel command's type name."""


class MessageHandle(BaseModel):
    """A message a handler sent: where it went, in which partition, its id, and the
    endpoint and incoming message that sent it (its token's name starts with
    ``{sender}/{incoming_id}/``). The message id is deterministic, so a handler run again for
    the same message returns an equal handle."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    destination: str = Field(pattern=_ENDPOINT)
    partition_key: str = Field(min_length=1, max_length=MAX_PARTITION_CHARS)
    message_id: str = Field(pattern=_UUID)
    sender: str = Field(pattern=_ENDPOINT)
    incoming_id: str = Field(pattern=_UUID)


class CancelScheduled(Command):
    """Cancel message ``message_id`` that ``sender`` sent while processing ``incoming_id``:
    the built-in command ``ctx.cancel`` sends. Every field is checked when it is read, so a
    forged or damaged one is parked with its reason (a schema error)."""

    partition_by: ClassVar[str | None] = "partition"
    strict_reading: ClassVar[bool] = True

    sender: str = Field(pattern=_ENDPOINT)
    incoming_id: str = Field(pattern=_UUID)
    message_id: str = Field(pattern=_UUID)
    partition: str = Field(min_length=1, max_length=MAX_PARTITION_CHARS)

    @classmethod
    def type_name(cls) -> str:
        return CANCEL_TYPE

    @classmethod
    def of(cls, handle: MessageHandle) -> CancelScheduled:
        return cls(
            sender=handle.sender,
            incoming_id=handle.incoming_id,
            message_id=handle.message_id,
            partition=handle.partition_key,
        )
