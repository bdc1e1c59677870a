"""A transactional session's record O(s) and its identity (``shared.bus.session``).

O(s) is the row ``session|{s}`` in the session's partition of its endpoint's rows, beside the
user's own rows and the session's audit row ``audit|{s}``. It is inserted open before the
user's transaction begins, committed in that transaction (listing the signals of the tokens
it sends, as O(m) does), and marked signalled once they were sent. The cleanup finishes a
committed one left unsignalled and retires it once its tokens are consumed and its key's
dedup window has passed (``shared.cleanup.sessions``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from shared.bus.deliveries import OutgoingSignal, decode_signals, encode_signals
from shared.bus.formats import NEWEST, property_fields, property_version
from shared.bus.ids import derived_id, fresh_id
from shared.bus.ingress import check_idempotency_key, check_scope, record_key
from shared.bus.records import STATE_ROW, json_property
from shared.errors import CorruptRecord, InvalidName
from shared.stores.table import Entity

SESSION_PREFIX = "session|"
SESSION_MODE = "session"
"""The ``mode`` of a session's audit row: the audit counts what it caused as sent and the row
itself as no processing (nobody sent the session)."""

SessionStatus = Literal["open", "committed"]


def session_row(session_id: str) -> str:
    return f"{SESSION_PREFIX}{session_id}"


def session_id(endpoint: str, partition_key: str, scope: str, key: str | None) -> str:
    """The session's id: the same for every retry of one request (its key, in its sender's
    scope, on one endpoint and partition), so that a retry finds the first one's record;
    fresh when there is no key. The partition is part of it: one key in two partitions is
    two requests, each with its own record, never two records of one session."""
    if key is None:
        return fresh_id()
    return derived_id("session", endpoint, partition_key, record_key(check_scope(scope), key))


def check_session_key(key: str | None) -> str | None:
    return None if key is None else check_idempotency_key(key)


def check_user_row_key(row_key: str) -> str:
    """A row key the user's own entities may take in a session: the bus's rows are ``state``
    and keys holding ``|`` (``outbox|``, ``audit|``, ``session|``, the window modes' rows), so
    refusing those keeps a user's write from overwriting or forging one."""
    if not isinstance(row_key, str) or not row_key or "|" in row_key or row_key == STATE_ROW:
        raise InvalidName(
            f"row key {row_key!r}: a session's own rows take a non-empty key without '|', "
            f"other than {STATE_ROW!r} (those are the bus's rows)"
        )
    return row_key


@dataclass(frozen=True)
class SessionRecord:
    """O(s): open until the user's transaction commits it with its signals."""

    partition_key: str
    session_id: str
    round_id: str
    """Drawn fresh when O(s) is inserted: the session's messages, tokens and audit row are
    named by it (as an incoming message's id names a handler's), so that a request made
    again under its key after O(s) was retired (past the key's window) is a new round with
    new message ids, never a second processing of the first round's."""
    started_at: datetime
    status: SessionStatus = "open"
    committed_at: datetime | None = None
    signalled: bool = False
    outgoing: tuple[OutgoingSignal, ...] = ()
    abandoned: tuple[str, ...] = ()
    etag: str = ""
    format: int = NEWEST

    @property
    def committed(self) -> bool:
        return self.status == "committed"

    @property
    def token_names(self) -> frozenset[str]:
        return frozenset(o.token for o in self.outgoing)

    def committing(
        self, outgoing: list[OutgoingSignal], abandoned: list[str], at: datetime
    ) -> SessionRecord:
        return replace(
            self,
            status="committed",
            committed_at=at,
            outgoing=tuple(outgoing),
            abandoned=tuple(sorted({*self.abandoned, *abandoned})),
        )

    def to_entity(self) -> Entity:
        properties: dict[str, str | int | bool | datetime] = {
            **property_fields(self.format),
            "status": self.status,
            "round": self.round_id,
            "started_at": self.started_at,
            "signalled": self.signalled,
            "outgoing": json_property("outgoing", encode_signals(self.outgoing)),
            "abandoned": json_property("abandoned", json.dumps(list(self.abandoned))),
        }
        if self.committed_at is not None:
            properties["committed_at"] = self.committed_at
        return Entity(self.partition_key, session_row(self.session_id), properties)

    @classmethod
    def from_entity(cls, entity: Entity) -> SessionRecord:
        p = entity.properties
        where = f"session row {entity.partition_key!r}/{entity.row_key!r}"
        version = property_version(p, where)
        status = p.get("status")
        if status not in ("open", "committed"):
            raise CorruptRecord(f"{where}: status {status!r}")
        started_at, committed_at = p.get("started_at"), p.get("committed_at")
        round_id = p.get("round")
        if not isinstance(round_id, str) or not round_id:
            raise CorruptRecord(f"{where}: round {round_id!r}")
        if not isinstance(started_at, datetime):
            raise CorruptRecord(f"{where}: started_at {started_at!r}")
        if status == "committed" and not isinstance(committed_at, datetime):
            raise CorruptRecord(f"{where}: committed without committed_at")
        try:
            abandoned = tuple(str(a) for a in json.loads(str(p.get("abandoned", "[]"))))
        except (ValueError, TypeError) as e:
            raise CorruptRecord(f"{where}: abandoned list unreadable") from e
        return cls(
            partition_key=entity.partition_key,
            session_id=entity.row_key[len(SESSION_PREFIX) :],
            round_id=round_id,
            started_at=started_at,
            status="committed" if status == "committed" else "open",
            committed_at=committed_at if isinstance(committed_at, datetime) else None,
            signalled=p.get("signalled") is True,
            outgoing=decode_signals(str(p.get("outgoing", "[]"))),
            abandoned=abandoned,
            etag=entity.etag,
            format=version,
        )
