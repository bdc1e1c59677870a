"""Was this token committed? The one question the token cleanup asks of a token's origin.

A token is signalled only if the round that created it committed its attempt id into the
token's origin row (``shared.bus.origin``): O(m) in token mode, the processed-message row, the
state-based message index row, the entry for m in an entity-outbox state row, or the ingress
record. Once a token is older than the grace period, every round that could still commit it
has ended, so it is in flight if and only if its origin row lists its attempt.

When the origin row (or its entry for the message) is absent, what that proves depends on
the kind of row:
- O(m), a session's O(s) and ingress records are removed only after every token they
  committed is gone (see the outbox, sessions and ingress tasks), so their absence proves
  the token was never committed;
- the rows of the window-based modes expire after a retention period whether or not their
  tokens were consumed, so their absence proves nothing about a token older than that
  period: such a token is kept (and reported) rather than risk deleting one in flight.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared.bus.config import BusConfig
from shared.bus.deliveries import decode_signals
from shared.bus.ingress import INGRESS_ROW, ingress_version
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX, ProcessedRecord
from shared.bus.modes.state_based import INDEX_PREFIX, IndexEntry
from shared.bus.records import OUTBOX_PREFIX, STATE_ROW, OutboxRecord
from shared.bus.session_records import SESSION_PREFIX, SessionRecord
from shared.bus.state.rows import EndpointRows
from shared.stores.table import Entity


@dataclass(frozen=True)
class OriginKind:
    name: str
    matches: Callable[[str], bool]
    """Whether a RowKey is a row of this kind."""
    committed_attempts: Callable[[Entity, str], frozenset[str] | None]
    """The attempt ids the row committed for incoming message ``m``, or None when the row
    holds nothing about ``m``."""
    retention: Callable[[BusConfig], float] | None = None
    """None when the row outlives every token it committed; otherwise how long the row is
    kept, beyond which its absence proves nothing."""
    fence: Callable[[EndpointRows, Entity], Awaitable[Entity]] | None = None
    """For rows that exist before their commit and are committed with If-Match: rewrite the
    row unchanged (new ETag) so that a stalled round can no longer commit through it. Makes
    deleting a token of an uncommitted row safe however slow that round is."""


async def _fence_outbox(rows: EndpointRows, entity: Entity) -> Entity:
    if OutboxRecord.from_entity(entity).committed:
        return entity  # its commit changed the ETag already: no stalled round can commit now
    etag = await rows.update(entity, entity.etag)
    return Entity(entity.partition_key, entity.row_key, entity.properties, etag)


def _outbox(entity: Entity, incoming_id: str) -> frozenset[str] | None:
    record = OutboxRecord.from_entity(entity)
    if not record.committed:
        return frozenset()
    return frozenset(o.attempt_id for o in record.outgoing)


async def _fence_session(rows: EndpointRows, entity: Entity) -> Entity:
    if SessionRecord.from_entity(entity).committed:
        return entity  # committed: no stalled request can commit it again
    etag = await rows.update(entity, entity.etag)
    return Entity(entity.partition_key, entity.row_key, entity.properties, etag)


def _session(entity: Entity, incoming_id: str) -> frozenset[str] | None:
    record = SessionRecord.from_entity(entity)
    if record.round_id != incoming_id:
        return None  # a token of an earlier round of the key: this record says nothing of it
    return frozenset(o.attempt_id for o in record.outgoing) if record.committed else frozenset()


def _ingress(entity: Entity, incoming_id: str) -> frozenset[str] | None:
    # A record is written only by the round that commits it, and each round of one key has
    # its own incoming id: a token from another round of the key is not in this record.
    ingress_version(entity)
    if str(entity.properties.get("incoming_id")) != incoming_id:
        return None
    outgoing = decode_signals(str(entity.properties.get("outgoing", "[]")))
    return frozenset(o.attempt_id for o in outgoing)


def _processed(entity: Entity, incoming_id: str) -> frozenset[str] | None:
    return ProcessedRecord.from_entity(entity).committed_attempts


def _state_index(entity: Entity, incoming_id: str) -> frozenset[str] | None:
    return IndexEntry.from_entity(entity).committed_attempts


def _entity_outbox(entity: Entity, incoming_id: str) -> frozenset[str] | None:
    if "outbox_parts" not in entity.properties:
        return None  # a token- or processed-mode state row never commits tokens
    entry = StateEntity.from_entity(entity).entries.get(incoming_id)
    return None if entry is None else frozenset(entry.sent)


KINDS: list[OriginKind] = [
    OriginKind("outbox", lambda rk: rk.startswith(OUTBOX_PREFIX), _outbox, fence=_fence_outbox),
    OriginKind("session", lambda rk: rk.startswith(SESSION_PREFIX), _session, fence=_fence_session),
    OriginKind(
        "ingress", lambda rk: rk == INGRESS_ROW, _ingress, lambda c: c.ingress_window_seconds
    ),
    OriginKind(
        "processed",
        lambda rk: rk.startswith(PROCESSED_PREFIX),
        _processed,
        lambda c: c.processed_retention_seconds,
    ),
    OriginKind(
        "state_index",
        lambda rk: rk.startswith(INDEX_PREFIX),
        _state_index,
        lambda c: c.state_stream_retention_seconds,
    ),
    OriginKind(
        "entity_outbox",
        lambda rk: rk == STATE_ROW,
        _entity_outbox,
        lambda c: c.entity_outbox_retention_seconds,
    ),
]


def kind_of(row_key: str) -> OriginKind | None:
    for kind in KINDS:
        if kind.matches(row_key):
            return kind
    return None
