"""Message models: users subclass Command or Event (pydantic) and register them by type name."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from shared.errors import InvalidName, MessageTooLarge
from shared.stores.names import check_key

_TOPIC = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,98}[a-z0-9])?")

Kind = Literal["command", "event"]


class Message(BaseModel):
    """Base of all messages. ``partition_by`` names the field whose value is the receiver's
    partition key (its state and outbox records live in that table partition); without it all
    messages of the type share one partition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[Kind]
    partition_by: ClassVar[str | None] = None

    @classmethod
    def type_name(cls) -> str:
        return cls.__name__

    def partition_key(self) -> str:
        if self.partition_by is None:
            return "default"
        return str(getattr(self, self.partition_by))


class Command(Message):
    """Sent to exactly one named endpoint."""

    kind: ClassVar[Kind] = "command"


class Event(Message):
    """Published to every endpoint subscribed to its topic (by default its type name)."""

    kind: ClassVar[Kind] = "event"

    @classmethod
    def topic(cls) -> str:
        return check_topic(cls.__name__.lower())


def declared_type(type_name: str) -> type[Message] | None:
    """A message class of that type name defined anywhere in this process, or None: lets an
    error say "an event nobody subscribes to" rather than "unknown"."""
    pending: list[type[Message]] = [Command, Event]
    while pending:
        model = pending.pop()
        if model.type_name() == type_name and model not in (Command, Event):
            return model
        pending.extend(model.__subclasses__())
    return None


def check_topic(name: str) -> str:
    if not _TOPIC.fullmatch(name):
        raise InvalidName(
            f"invalid topic {name!r}: use 1-100 lowercase letters, digits, '.', '_' or '-'"
        )
    return name


def checked_partition_key(message: Message) -> str:
    """The message's partition key, refused before anything is written when Table Storage
    would refuse it (``/ \\ # ?``, control characters, over 1 KiB): the receiver could never
    store its state."""
    try:
        return check_key("PartitionKey", message.partition_key())
    except InvalidName as e:
        field = "" if message.partition_by is None else f" (from field {message.partition_by!r})"
        raise InvalidName(
            f"{message.type_name()} has an unusable partition key: {e}{field}"
        ) from None


def body_of(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json")


def check_payload_size(message: Message, limit: int) -> None:
    """Refuse a message whose serialised body exceeds ``limit`` bytes, before anything is
    written (BusConfig.max_payload_bytes). The serialiser's own UTF-8 bytes are measured
    (``model_dump_json`` would decode them to a text, and encoding that again copies a large
    body twice more)."""
    size = len(message.__pydantic_serializer__.to_json(message))
    if size > limit:
        raise MessageTooLarge(
            f"{type(message).__name__} body is {size:,} bytes; the limit is {limit:,} bytes "
            "(BUS_MAX_PAYLOAD_BYTES)"
        )
