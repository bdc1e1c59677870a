"""What the kit shows a test: the messages delivered, as their envelopes say, and the audit
rows, as the audit reads them (``shared.audit.rows``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.audit.rows import AUDIT_COLUMNS, audit_row
from shared.bus.envelope import Envelope, Signal
from shared.bus.messages import Message, type_names
from shared.bus.payloads import resolve
from shared.errors import BusError
from shared.stores.account import StorageAccount

M = TypeVar("M", bound=Message)
Containers = tuple[str, str]
"""The tokens container and the payloads container."""


@dataclass(frozen=True)
class Delivered:
    """One message to one destination, as its token holds it."""

    id: str
    type_name: str
    source: str
    destination: str
    partition_key: str
    body: Mapping[str, Any]

    def is_a(self, model: type[Message]) -> bool:
        """Whether this is a ``model`` (by its type name or a former one)."""
        return self.type_name in type_names(model)

    def as_(self, model: type[M]) -> M:
        """The body read as ``model``."""
        return model.model_validate(dict(self.body))


async def delivered(account: StorageAccount, containers: Containers, raw: str) -> Delivered | None:
    """The message a queue message ``raw`` signals, read from its token (or the signal's copy
    of it that the token's name proves); None for a signal whose token is gone (a copy of a
    message already processed) or that is not a readable signal at all."""
    try:
        signal = Signal.parse(raw)
    except (BusError, ValueError):
        return None
    return await token_message(account, containers, signal.token, signal.bound_envelope_copy())


async def token_message(
    account: StorageAccount, containers: Containers, token: str, copy: str | None = None
) -> Delivered | None:
    """The message token ``token`` holds (``copy``: its envelope, already proven to be the
    token's); None when the token is gone or unreadable."""
    tokens, payloads = containers
    try:
        if copy is None:
            copy_bytes = (await account.blob_container(tokens).read(token)).data
        else:
            copy_bytes = copy.encode("utf-8")
        envelope = Envelope.from_bytes(copy_bytes)
        envelope = await resolve(account.blob_container(payloads), token, envelope)
    except (BusError, ValueError):
        return None
    return Delivered(
        envelope.id,
        envelope.type,
        envelope.source,
        envelope.destination,
        envelope.partition_key,
        envelope.body or {},
    )


@dataclass(frozen=True)
class Caused:
    """One delivery an audit row says its message caused."""

    id: str | None
    type: str | None
    destination: str | None


@dataclass(frozen=True)
class AuditEntry:
    """One audit row: what processing one message at ``endpoint`` did."""

    endpoint: str | None
    partition_key: str
    message_id: str | None
    message_type: str | None
    source: str | None
    mode: str | None
    caused: tuple[Caused, ...] | None
    """None: the row's list cannot be read (the audit counts such a row as invalid)."""


def audit_entry(table: str, partition_key: str, properties: Mapping[str, object]) -> AuditEntry:
    row = dict(zip(AUDIT_COLUMNS, audit_row(table, partition_key, properties), strict=True))
    caused = row["caused"]
    return AuditEntry(
        endpoint=_text(row["endpoint"]),
        partition_key=partition_key,
        message_id=_text(row["message_id"]),
        message_type=_text(row["message_type"]),
        source=_text(row["source"]),
        mode=_text(row["mode"]),
        caused=None
        if not isinstance(caused, list)
        else tuple(Caused(d["id"], d["type"], d["destination"]) for d in caused),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
