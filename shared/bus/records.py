"""The rows an endpoint keeps in its table partition, and their entity encoding.

Layout inside partition p: ``state`` (business state JSON), ``outbox|{m}`` (the outbox record
of incoming message m) and ``audit|{m}`` (what processing m did; feeds the Spark audit).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from shared.bus.deliveries import OutgoingSignal as OutgoingSignal  # its home before deliveries
from shared.bus.deliveries import decode_signals, encode_signals
from shared.bus.formats import NEWEST, property_fields, property_version
from shared.errors import CorruptRecord, MessageTooLarge
from shared.stores.names import MAX_ENTITY_BYTES, utf16_size
from shared.stores.table import Entity

STATE_ROW = "state"
OUTBOX_PREFIX = "outbox|"
AUDIT_PREFIX = "audit|"

OutboxStatus = Literal["claimed", "committed"]
AuditOutcome = Literal["cancelled", "saga_not_found"]
AUDIT_OUTCOMES: tuple[AuditOutcome, ...] = typing.get_args(AuditOutcome)


def outbox_row(message_id: str) -> str:
    return f"{OUTBOX_PREFIX}{message_id}"


def audit_row(message_id: str) -> str:
    return f"{AUDIT_PREFIX}{message_id}"


def json_property(name: str, value: str) -> str:
    """``value`` if a table row can hold it (spread across properties where it is longer than
    one: ``shared.stores.spread``), else a MessageTooLarge that says why. The row's other
    properties count too; the store refuses what this lets through and does not fit."""
    size = utf16_size(value)
    if size > MAX_ENTITY_BYTES:
        raise MessageTooLarge(
            f"the {name} list of one message is {size:,} bytes; a table row holds "
            f"{MAX_ENTITY_BYTES:,}: send fewer messages per handler run"
        )
    return value


@dataclass(frozen=True)
class OutboxRecord:
    """O(m): created (status ``claimed``) before the token is claimed, committed together with
    the state change, and retired by the cleanup once the incoming token is gone."""

    partition_key: str
    message_id: str
    claim: str
    incoming_token: str
    started_at: datetime
    status: OutboxStatus = "claimed"
    committed_at: datetime | None = None
    outgoing: tuple[OutgoingSignal, ...] = ()
    abandoned: tuple[str, ...] = ()
    etag: str = ""
    format: int = NEWEST
    """The format version it is stored in (``shared.bus.formats``): BUS_WIRE_FORMAT when it
    is created, the one it was read in after that."""
    outcome: AuditOutcome | None = None
    """``cancelled`` for the record a cancellation committed (``shared.bus.cancel``): a
    committed record with no outputs, which an instance that does not know the property
    reads as a message processed with no outputs. None, and no property, otherwise."""

    @property
    def committed(self) -> bool:
        return self.status == "committed"

    def committing(
        self,
        outgoing: list[OutgoingSignal],
        abandoned: list[str],
        at: datetime,
        outcome: AuditOutcome | None = None,
    ) -> OutboxRecord:
        return replace(
            self,
            status="committed",
            committed_at=at,
            outgoing=tuple(outgoing),
            abandoned=tuple(sorted({*self.abandoned, *abandoned})),
            outcome=outcome,
        )

    def to_entity(self) -> Entity:
        properties: dict[str, str | int | datetime] = {
            **property_fields(self.format),
            "claim": self.claim,
            "status": self.status,
            "incoming": self.incoming_token,
            "started_at": self.started_at,
            "outgoing": json_property("outgoing", encode_signals(self.outgoing)),
            "abandoned": json_property("abandoned", json.dumps(list(self.abandoned))),
        }
        if self.committed_at is not None:
            properties["committed_at"] = self.committed_at
        if self.outcome is not None:
            properties["outcome"] = self.outcome
        return Entity(self.partition_key, outbox_row(self.message_id), properties)

    @classmethod
    def from_entity(cls, entity: Entity) -> OutboxRecord:
        p = entity.properties
        where = f"outbox row {entity.partition_key!r}/{entity.row_key!r}"
        version = property_version(p, where)
        status = str(p["status"])
        if status not in ("claimed", "committed"):
            raise CorruptRecord(f"{where}: status {status!r}")
        committed_at = p.get("committed_at")
        outcome = next((o for o in AUDIT_OUTCOMES if o == p.get("outcome")), None)
        if outcome is None and p.get("outcome") is not None:
            raise CorruptRecord(f"{where}: outcome {p.get('outcome')!r}")
        started_at = p["started_at"]
        if not isinstance(started_at, datetime):
            raise CorruptRecord(f"{where}: started_at {started_at!r}")
        return cls(
            partition_key=entity.partition_key,
            message_id=entity.row_key[len(OUTBOX_PREFIX) :],
            claim=str(p["claim"]),
            incoming_token=str(p["incoming"]),
            started_at=started_at,
            status="committed" if status == "committed" else "claimed",
            committed_at=committed_at if isinstance(committed_at, datetime) else None,
            outgoing=decode_signals(str(p["outgoing"])),
            abandoned=tuple(json.loads(str(p["abandoned"]))),
            etag=entity.etag,
            format=version,
            outcome=outcome,
        )


def caused_by(outgoing: Iterable[OutgoingSignal]) -> list[dict[str, str]]:
    """What an audit row says a message caused: each delivery's id, type and destination."""
    return [{"id": o.message_id, "type": o.type, "destination": o.destination} for o in outgoing]


@dataclass(frozen=True)
class AuditRecord:
    """What processing one message did, written in the same transaction as its effects."""

    partition_key: str
    endpoint: str
    message_id: str
    message_type: str
    source: str
    correlation_id: str
    causation_id: str | None
    sent_at: datetime
    processed_at: datetime
    mode: str
    caused: list[dict[str, str]] = field(default_factory=list)
    outcome: AuditOutcome | None = None
    """What became of the message when its handler did not simply run: ``cancelled`` (a
    scheduled message cancelled before it was delivered) or ``saga_not_found`` (a saga's
    message for an instance that does not exist, acknowledged without its handler). None,
    and no property, for a message processed as usual, whose row stays as it always was."""

    def to_entity(self) -> Entity:
        extra: dict[str, str] = {} if self.outcome is None else {"outcome": self.outcome}
        return Entity(
            self.partition_key,
            audit_row(self.message_id),
            {
                **extra,
                "endpoint": self.endpoint,
                "message_id": self.message_id,
                "message_type": self.message_type,
                "source": self.source,
                "correlation_id": self.correlation_id,
                "causation_id": self.causation_id or "",
                "sent_at": self.sent_at,
                "processed_at": self.processed_at,
                "mode": self.mode,
                "caused": json_property("caused", json.dumps(self.caused)),
            },
        )
