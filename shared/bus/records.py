"""The rows an endpoint keeps in its table partition, and their entity encoding.

Layout inside partition p: ``state`` (business state JSON), ``outbox|{m}`` (the outbox record
of incoming message m) and ``audit|{m}`` (what processing m did; feeds the Spark audit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from shared.bus.envelope import TOKEN_NAME
from shared.errors import CorruptRecord, MessageTooLarge
from shared.stores.names import MAX_ENTITY_BYTES, utf16_size
from shared.stores.table import Entity

if TYPE_CHECKING:
    from shared.bus.envelope import Envelope

STATE_ROW = "state"
OUTBOX_PREFIX = "outbox|"
AUDIT_PREFIX = "audit|"

OutboxStatus = Literal["claimed", "committed"]


def outbox_row(message_id: str) -> str:
    return f"{OUTBOX_PREFIX}{message_id}"


def audit_row(message_id: str) -> str:
    return f"{AUDIT_PREFIX}{message_id}"


class OutgoingSignal(BaseModel):
    """One committed outgoing message: where it goes and which token carries it.

    The envelope itself lives in the token, which keeps the outbox record small."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    destination: str
    message_id: str
    attempt_id: str
    token: str
    partition_key: str
    type: str
    deliver_at: datetime | None = None
    """A delayed message's due time, so that R6 (also when resumed from the stored record)
    sends its signal hidden until then. Left out of the stored form when absent."""

    @model_validator(mode="before")
    @classmethod
    def _ids_from_token_name(cls, data: Any) -> Any:
        """Stored forms leave out the ids their token name already holds (see below)."""
        if isinstance(data, dict) and not {"message_id", "attempt_id"} <= data.keys():
            match = TOKEN_NAME.fullmatch(str(data.get("token", "")))
            if match is not None:
                return {"message_id": match["out"], "attempt_id": match["attempt"], **data}
        return data

    @model_serializer(mode="wrap")
    def _without_ids_in_token_name(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The message and attempt ids are segments of the token's name: storing them twice
        would cost a third of an outbox record, which must hold up to ``max_deliveries`` of
        these in one table entity."""
        data = handler(self)
        match = TOKEN_NAME.fullmatch(self.token)
        if match is not None and (match["out"], match["attempt"]) == (
            self.message_id,
            self.attempt_id,
        ):
            del data["message_id"], data["attempt_id"]
        if self.deliver_at is None:
            data.pop("deliver_at", None)
        else:  # stored with json.dumps, which takes no datetime
            data["deliver_at"] = self.deliver_at.isoformat()
        return data

    @classmethod
    def for_token(cls, envelope: Envelope, attempt_id: str, token: str) -> OutgoingSignal:
        """The signal for ``token``, created for ``envelope`` under ``attempt_id``."""
        return cls(
            destination=envelope.destination,
            message_id=envelope.id,
            attempt_id=attempt_id,
            token=token,
            partition_key=envelope.partition_key,
            type=envelope.type,
            deliver_at=envelope.deliver_at,
        )


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

    @property
    def committed(self) -> bool:
        return self.status == "committed"

    def committing(
        self, outgoing: list[OutgoingSignal], abandoned: list[str], at: datetime
    ) -> OutboxRecord:
        return replace(
            self,
            status="committed",
            committed_at=at,
            outgoing=tuple(outgoing),
            abandoned=tuple(sorted({*self.abandoned, *abandoned})),
        )

    def to_entity(self) -> Entity:
        properties: dict[str, str | datetime] = {
            "claim": self.claim,
            "status": self.status,
            "incoming": self.incoming_token,
            "started_at": self.started_at,
            "outgoing": json_property(
                "outgoing", json.dumps([o.model_dump() for o in self.outgoing])
            ),
            "abandoned": json_property("abandoned", json.dumps(list(self.abandoned))),
        }
        if self.committed_at is not None:
            properties["committed_at"] = self.committed_at
        return Entity(self.partition_key, outbox_row(self.message_id), properties)

    @classmethod
    def from_entity(cls, entity: Entity) -> OutboxRecord:
        p = entity.properties
        status = str(p["status"])
        if status not in ("claimed", "committed"):
            raise CorruptRecord(
                f"outbox row {entity.partition_key!r}/{entity.row_key!r}: status {status!r}"
            )
        committed_at = p.get("committed_at")
        started_at = p["started_at"]
        if not isinstance(started_at, datetime):
            raise CorruptRecord(
                f"outbox row {entity.partition_key!r}/{entity.row_key!r}: started_at {started_at!r}"
            )
        return cls(
            partition_key=entity.partition_key,
            message_id=entity.row_key[len(OUTBOX_PREFIX) :],
            claim=str(p["claim"]),
            incoming_token=str(p["incoming"]),
            started_at=started_at,
            status="committed" if status == "committed" else "claimed",
            committed_at=committed_at if isinstance(committed_at, datetime) else None,
            outgoing=tuple(
                OutgoingSignal.model_validate(o) for o in json.loads(str(p["outgoing"]))
            ),
            abandoned=tuple(json.loads(str(p["abandoned"]))),
            etag=entity.etag,
        )


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

    def to_entity(self) -> Entity:
        return Entity(
            self.partition_key,
            audit_row(self.message_id),
            {
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
