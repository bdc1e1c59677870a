"""Message models: users subclass Command or Event (pydantic) and register them by type name."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict

from shared.errors import ConfigurationError, InvalidName, MessageTooLarge
from shared.stores.names import check_key

_TOPIC = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,98}[a-z0-9])?")

Kind = Literal["command", "event"]


class Message(BaseModel):
    """Base of all messages. ``partition_by`` names the field whose value is the receiver's
    partition key (its state and outbox records live in that table partition); without it all
    messages of the type share one partition.

    How a type changes while messages of its older shape still wait in queues
    (``docs/writing-endpoints.md``, "When a message type changes"): a received body's fields
    the model does not know are dropped unless ``strict_reading``; ``former_names`` are the
    type names it had before; ``version`` above 1 reads older bodies through ``previous``
    and ``upcast`` (``shared.bus.reading``)."""

    # Constructing a message with a field the model lacks (a typo in a handler) fails at
    # once; only reading a received body drops unknown fields (``shared.bus.reading``).
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[Kind]
    partition_by: ClassVar[str | None] = None
    strict_reading: ClassVar[bool] = False
    """True: a received body with a field the model does not know fails its schema."""
    former_names: ClassVar[tuple[str, ...]] = ()
    """Type names this type had before a rename: received under them, it is this type."""
    version: ClassVar[int] = 1
    """The shape's version; above 1, ``previous`` is the model of the version before."""
    previous: ClassVar[type[BaseModel] | None] = None
    """The model of version ``version - 1`` (it may have its own ``previous``)."""
    oldest_version: ClassVar[int] = 1
    """The oldest version still read: the chain of ``previous`` models goes down to it, and a
    body of an older version is refused as a schema error (its upcaster was retired)."""

    @classmethod
    def type_name(cls) -> str:
        return cls.__name__

    @classmethod
    def upcast(cls, old: Any) -> Self:
        """This type read from a body of ``previous``'s shape; a version above 1 defines it."""
        raise ConfigurationError(
            f"{cls.type_name()} version {cls.version} defines no upcast from its previous version"
        )

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

    @classmethod
    def former_topics(cls) -> tuple[str, ...]:
        """Topics this event was published under before a rename: its former names, lower
        case, that are valid topics. Its handlers subscribe to them too, and a publish reaches
        their subscribers too."""
        lowered = (name.lower() for name in cls.former_names)
        return tuple(t for t in dict.fromkeys(lowered) if _TOPIC.fullmatch(t) and t != cls.topic())


def type_names(model: type[Message]) -> tuple[str, ...]:
    """Every name a message of ``model`` is received under: its own, then its former ones."""
    return (model.type_name(), *model.former_names)


def topics_of(model: type[Event]) -> tuple[str, ...]:
    """Every topic whose events ``model``'s handlers take: its own, then its former ones."""
    return (model.topic(), *model.former_topics())


def declared_type(type_name: str) -> type[Message] | None:
    """A message class of that type name (or former name) defined anywhere in this process,
    or None: lets an error say "an event nobody subscribes to" rather than "unknown"."""
    pending: list[type[Message]] = [Command, Event]
    while pending:
        model = pending.pop()
        if type_name in type_names(model) and model not in (Command, Event):
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
