"""Sending from outside the bus (HTTP, CLI, batch jobs): R5-R6 without an incoming message.

The client's idempotency key names an ingress record; a retry with the same key within the
ingress window finds the committed record and re-sends its signals instead of sending anew.
This window (BusConfig.ingress_window_seconds, 7 days by default) is the only time window in
the system: receivers deduplicate by token, without one.

Where the record lives depends on BUS_INGRESS_KEY_SCOPES (BusConfig.ingress_key_scopes).
Off, the default while a deploy replaces instances of the previous version: under the raw
key, with the previous version's properties (it reads only ``expires_at`` and ``outgoing``)
and a fingerprint of the message, so old and new instances answer each other's retries and
a key reused for a different message is refused once its record has a fingerprint. On:
under ``scope|key``, each sender's keys its own; a raw-key record without a scope (the
previous version's, or this one's while off) still answers the kind of sender that wrote it.

What makes a retry the same message: two fingerprints (``Fingerprints``). The message's, as
this version's model sees it, which instances of earlier releases compare; and, for a client
request (HTTP, ``bus send``/``publish``, a bulk row), the request's as the client sent it,
which an app's next version sees alike even where its model does not (a field added with a
default, a field removed, a type renamed): a retry reaching either version of the app during
a rolling deploy is answered with the first receipt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.bus.config import BusConfig
from shared.bus.context import PendingOutput
from shared.bus.deliveries import decode_signals, encode_signals, first_format
from shared.bus.formats import FIRST, property_fields, property_version
from shared.bus.ids import bounded_json_sha256, derived_id, json_sha256
from shared.bus.messages import (
    Command,
    Event,
    Message,
    check_payload_size,
    checked_partition_key,
    type_names,
)
from shared.bus.origin import Origin
from shared.bus.outgoing import (
    OUTBOX_MARGIN_BYTES,
    create_tokens,
    discard_tokens,
    plan_deliveries,
    send_signals,
)
from shared.bus.records import OutgoingSignal
from shared.bus.rounds import Conflict, conflict_rounds
from shared.bus.routes import Routes
from shared.bus.schedule import due_time
from shared.bus.telemetry import within
from shared.bus.topics import RecipientLists
from shared.clock import to_datetime
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    IdempotencyKeyReused,
    InvalidName,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
)
from shared.resources import check_endpoint_name
from shared.stores.account import StorageAccount
from shared.stores.names import MAX_ENTITY_BYTES, check_key, utf16_size
from shared.stores.spread import gathered, spread
from shared.stores.table import Entity

INGRESS_ROW = "ingress"
MAX_KEY_CHARS = 200
SCOPE_SEPARATOR = "|"
SCOPE = re.compile(r"[A-Za-z0-9._:-]{1,100}")
"""What a sender scope may hold: no ``|``, so ``record_key`` stays unambiguous."""


@dataclass(frozen=True)
class SendReceipt:
    """What a client send did: the message ids it created, and whether it was a repeat."""

    idempotency_key: str
    message_ids: tuple[str, ...]
    deduplicated: bool

    def as_json(self) -> dict[str, Any]:
        """What the HTTP ingress answers and ``bus send`` prints."""
        return {
            "idempotency_key": self.idempotency_key,
            "message_ids": list(self.message_ids),
            "deduplicated": self.deduplicated,
        }


def check_idempotency_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS:
        raise InvalidName(f"idempotency key must be 1-{MAX_KEY_CHARS} characters")
    return check_key("Idempotency key", key)


def check_scope(scope: str) -> str:
    if not isinstance(scope, str) or not SCOPE.fullmatch(scope):
        raise InvalidName(
            f"sender scope {scope!r}: 1-100 letters, digits, '.', '_', ':' or '-' (no '|')"
        )
    return scope


def record_key(scope: str, key: str) -> str:
    """The partition key of ``key``'s ingress record for sender ``scope``: ``scope|key``. The
    scope holds no ``|``, so the first one splits the pair back: distinct pairs, distinct
    records, whatever the key holds (``|`` included)."""
    return f"{check_scope(scope)}{SCOPE_SEPARATOR}{key}"


def fingerprint(output: PendingOutput, delay: timedelta | None, deliver_at: datetime | None) -> str:
    """What identifies a client's message, as the client asked for it: its type, destination
    (None for an event), body and due time (the delay as given, not the time it gave: a retry
    of a delayed send comes later). A SHA-256 digest of their canonical JSON."""
    message = output.message
    asked = {
        "type": message.type_name(),
        "to": output.to,
        "body": message.model_dump(mode="json"),
        "delay": _seconds(delay),
        "deliver_at": _instant_or_none(deliver_at),
    }
    return json_sha256(asked, _CANONICAL)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""The JSON text a fingerprint hashes: sorted keys, no spaces, UTF-8 as is."""
_AS_GIVEN = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
)
"""``_CANONICAL`` for a request as given: a bulk row may hold values JSON has no type for
(a Parquet timestamp, a decimal), hashed by their ``repr``."""


def request_digest(
    type_name: str, to: str | None, body: Mapping[str, object], max_bytes: int
) -> str | None:
    """What a client asked for, before any model read it: the type name, destination (None
    when left out) and body exactly as given, a SHA-256 digest of their canonical JSON
    (``Fingerprints.of`` adds the due time), hashed in slices, not copied whole. None when
    that JSON is over ``max_bytes`` (a body's fields a model would drop count too): the
    caller refuses such a request."""
    return bounded_json_sha256({"type": type_name, "to": to, "body": body}, _AS_GIVEN, max_bytes)


REQUEST_FINGERPRINT = "request_fingerprint"
"""The record's property holding ``Fingerprints.request`` (format 2 on)."""


@dataclass(frozen=True)
class Fingerprints:
    """What identifies a send for its key's record: the message as this version's model sees
    it (``fingerprint``; what instances of earlier releases compare), and the request as its
    client sent it (None for a Python caller's message, which has no request)."""

    message: str
    request: str | None = None

    @classmethod
    def of(
        cls,
        output: PendingOutput,
        delay: timedelta | None,
        deliver_at: datetime | None,
        request: str | None,
    ) -> Fingerprints:
        """``request``: ``request_digest`` of the client's request, joined here with its due
        time as the message's fingerprint takes it."""
        due = {"delay": _seconds(delay), "deliver_at": _instant_or_none(deliver_at)}
        of_request = (
            None if request is None else json_sha256({"request": request, **due}, _CANONICAL)
        )
        return cls(fingerprint(output, delay, deliver_at), of_request)

    def record_fields(self, wire_format: int) -> dict[str, str]:
        """The record's properties: the request's only from format 2 (format 1 is exactly
        what releases before format versions wrote; they ignore what they do not read)."""
        fields = {"fingerprint": self.message}
        if self.request is not None and wire_format != FIRST:
            fields[REQUEST_FINGERPRINT] = self.request
        return fields

    def match(self, record: Entity) -> bool:
        """Whether ``record`` was written for the same send: the same message as this
        version's model sees it, or the same request as its client sent it (both known)."""
        if record.get("fingerprint") == self.message:
            return True
        recorded = record.get(REQUEST_FINGERPRINT)
        return self.request is not None and recorded == self.request


class IngressClient:
    """Sends commands and publishes events on behalf of ``sender`` (e.g. 'http', 'cli'), to
    the destinations ``routes`` (the app's) allows. ``scope`` (default: ``sender``) says whose
    idempotency keys these are: ``http:<caller>``, ``bulk:<job>``. ``legacy`` False: records
    of the previous version never answer (refused as a reused key)."""

    def __init__(
        self,
        account: StorageAccount,
        topics: RecipientLists,
        config: BusConfig,
        sender: str = "ingress",
        *,
        routes: Routes,
        scope: str | None = None,
        legacy: bool = True,
    ) -> None:
        self.account = account
        self.topics = topics
        self.routes = routes
        self.config = config
        self.sender = check_endpoint_name(sender)
        self.scope = check_scope(sender if scope is None else scope)
        """Whose keys these are: a key is one message per scope (the module's docstring)."""
        self.legacy = legacy
        """Whether a record of the previous version, which names only the kind of sender
        that wrote it, may answer for this scope: not when several callers share the kind
        (HTTP callers under Entra ID), since it cannot say which of them wrote it."""
        self.table = account.table(config.ingress_table)
        self.tokens = account.blob_container(config.tokens_container)
        self.payloads = account.blob_container(config.payloads_container)

    async def send(
        self,
        command: Command,
        *,
        to: str,
        idempotency_key: str,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
        request: str | None = None,
    ) -> SendReceipt:
        """Send ``command`` to ``to``; with ``delay`` or ``deliver_at``, it is not processed
        before then (a retry with the same key keeps the first call's due time). ``request``:
        the client's request it was read from (``request_digest``), if any."""
        if not isinstance(command, Command):
            raise TypeError("send() takes a Command")
        due = self._due(delay, deliver_at)
        output = PendingOutput(command, check_endpoint_name(to), {}, deliver_at=due)
        asked = Fingerprints.of(output, delay, deliver_at, request)
        return await self._submit(output, idempotency_key, asked)

    async def submit(
        self,
        message: Message,
        *,
        to: str | None,
        idempotency_key: str,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
        request: str | None = None,
    ) -> SendReceipt:
        """``send`` a command to ``to``, or ``publish`` an event (``to`` None): for callers
        that hold a message of either kind, with the destination and the request's digest
        ``build_message`` gave."""
        if isinstance(message, Command) and to is not None:
            return await self.send(
                message,
                to=to,
                idempotency_key=idempotency_key,
                delay=delay,
                deliver_at=deliver_at,
                request=request,
            )
        if isinstance(message, Event) and to is None:
            return await self.publish(
                message,
                idempotency_key=idempotency_key,
                delay=delay,
                deliver_at=deliver_at,
                request=request,
            )
        raise TypeError(f"{message.type_name()} cannot be submitted with to={to!r}")

    async def publish(
        self,
        event: Event,
        *,
        idempotency_key: str,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
        request: str | None = None,
    ) -> SendReceipt:
        if not isinstance(event, Event):
            raise TypeError("publish() takes an Event")
        due = self._due(delay, deliver_at)
        output = PendingOutput(event, None, {}, deliver_at=due)
        asked = Fingerprints.of(output, delay, deliver_at, request)
        return await self._submit(output, idempotency_key, asked)

    def _due(self, delay: timedelta | None, deliver_at: datetime | None) -> datetime | None:
        return due_time(to_datetime(self.config.clock()), delay, deliver_at)

    async def _submit(self, output: PendingOutput, key: str, asked: Fingerprints) -> SendReceipt:
        check_idempotency_key(key)
        checked_partition_key(output.message)
        check_payload_size(output.message, self.config.max_payload_bytes)
        telemetry = self.config.telemetry
        # The span of this send: the messages it creates carry it as their trace context.
        span = telemetry.ingress(self.sender, output.message.type_name())
        with telemetry.active(), within(span):
            receipt = await self._send_once(output, key, asked)
            span.set_attribute("bus.deduplicated", receipt.deduplicated)
            return receipt

    async def _send_once(self, output: PendingOutput, key: str, asked: Fingerprints) -> SendReceipt:
        return await conflict_rounds(
            self.config,
            lambda: self._send_round(output, key, asked),
            f"ingress key {key!r} kept conflicting",
        )

    async def _send_round(
        self, output: PendingOutput, key: str, asked: Fingerprints
    ) -> SendReceipt:
        """One round: read the key's record (this scope's, then the previous version's under
        the raw key), then either re-send what it lists (the same message) or refuse (another
        message), or create the message's tokens and record them; raises Conflict to start
        again from the read."""
        config = self.config
        now = to_datetime(config.clock())
        if config.ingress_key_scopes:
            partition = record_key(self.scope, key)
            existing = await self._record(partition)
            if existing is not None and _expires(existing) > now:
                # No scope: a legacy record whose raw key reads like scope|key.
                if existing.get("scope") is None:
                    return await self._legacy(existing, output, key, asked)
                return await self._same(existing, key, asked)
            legacy = await self._record(key)
            if legacy is not None and legacy.get("scope") is None and _expires(legacy) > now:
                return await self._legacy(legacy, output, key, asked)
        else:
            # BUS_INGRESS_KEY_SCOPES=off: the previous version's record, where and as it keeps
            # it (the raw key), so old and new instances answer each other during a deploy.
            partition = key
            existing = await self._record(partition)
            if existing is not None and _expires(existing) > now:
                if existing.get("fingerprint") is None:
                    return await self._resend(existing, key)  # as the previous version does
                return await self._same(existing, key, asked)
            # An instance already switched on (while the setting's change restarts them)
            # records under the scoped key: its record answers here too. Only one that names
            # this scope: a raw key spelled like scope|key is another sender's record.
            scoped = await self._record(record_key(self.scope, key))
            if scoped is not None and scoped.get("scope") == self.scope and _expires(scoped) > now:
                return await self._same(scoped, key, asked)

        # A fresh incoming id per round: only the round that commits is ever visible, and
        # a key reused after its window gets new message ids rather than colliding.
        incoming_id = derived_id(self.sender, key, config.new_id())
        deliveries = await plan_deliveries(
            [output],
            sender=self.sender,
            incoming_id=incoming_id,
            correlation_id=incoming_id,
            topics=self.topics,
            routes=self.routes,
            config=config,
        )
        created = await create_tokens(
            self.tokens,
            deliveries,
            payloads=self.payloads,
            sender=self.sender,
            incoming_id=incoming_id,
            config=config,
            origin=Origin(self.table.name, partition, INGRESS_ROW).encode(),
        )
        record = Entity(
            partition,
            INGRESS_ROW,
            {
                **property_fields(config.wire_format),
                **({"scope": self.scope, "key": key} if config.ingress_key_scopes else {}),
                **asked.record_fields(config.wire_format),
                "sender": self.sender,
                "incoming_id": incoming_id,
                "type": output.message.type_name(),
                "created_at": now,
                "expires_at": now + timedelta(seconds=config.ingress_window_seconds),
                "outgoing": self._signals_text(created.committed_candidates),
                "abandoned": json.dumps(created.abandoned),
            },
        )
        try:
            if existing is None:
                await self.table.insert(spread(record))
            else:
                await self.table.update(spread(record), etag=existing.etag)
        except (AlreadyExists, PreconditionFailed) as e:
            await discard_tokens(self.tokens, created.committed_candidates)
            raise Conflict from e
        except OutcomeUnknown as e:
            raise Conflict from e  # may have landed: the next round reads the record and finds out
        outgoing = tuple(created.committed_candidates)
        await send_signals(self.account, outgoing, created.hints, config=config)
        return SendReceipt(key, tuple(o.message_id for o in outgoing), False)

    async def recorded(self, key: str) -> Entity | None:
        """The record ``key`` names for this client's scope, whether or not its window has
        passed (a cancel goes by it: ``shared.bus.client_cancel``): this scope's own, else,
        where the previous version's records may answer (``legacy``), one under the raw key
        with no scope written by the kind of sender the scope belongs to. None: no such key
        here (another scope's record never answers)."""
        check_idempotency_key(key)
        scoped = await self._record(record_key(self.scope, key))
        if scoped is not None and scoped.get("scope") == self.scope:
            return scoped
        if not self.legacy:
            return None
        raw = await self._record(key)
        if raw is None or raw.get("scope") is not None:
            return None
        # The kind of sender a scope belongs to (``http`` for ``http:<caller>``) is all such
        # a record names; with BUS_INGRESS_KEY_SCOPES off every record is one of these.
        return raw if raw.get("sender") == self.scope.split(":")[0] else None

    def _signals_text(self, outgoing: list[OutgoingSignal]) -> str:
        """The record's signals: compact (``shared.bus.deliveries``), except while
        BUS_INGRESS_KEY_SCOPES is off, when instances of the previous version read this
        version's records: then as the previous version wrote them, unless that format would
        not fit the record (a publish the previous version refused, so its retries could
        not have reached one of its instances with a record to read)."""
        compact = encode_signals(outgoing)
        if self.config.ingress_key_scopes:
            return compact
        first = first_format(outgoing)
        return first if utf16_size(first) <= MAX_ENTITY_BYTES - OUTBOX_MARGIN_BYTES else compact

    async def _record(self, partition: str) -> Entity | None:
        """The record under ``partition``, if any, in a format this instance reads (a newer
        one is NewerVersion, even past its window: it is never overwritten here)."""
        try:
            # A publish to many subscribers lists more signals than one property holds.
            record = gathered(await self.table.get(partition, INGRESS_ROW))
        except NotFound:
            return None
        ingress_version(record)
        return record

    async def _resend(self, record: Entity, key: str) -> SendReceipt:
        """The first send's receipt, its signals sent again (R6 resumed)."""
        outgoing = _outgoing(record)
        await send_signals(self.account, outgoing, config=self.config)
        return SendReceipt(key, tuple(o.message_id for o in outgoing), True)

    async def _same(self, record: Entity, key: str, asked: Fingerprints) -> SendReceipt:
        """A record with a fingerprint: the first send's receipt for the same message, a
        refusal for another one."""
        if not asked.match(record):
            raise IdempotencyKeyReused(_reused(key))
        return await self._resend(record, key)

    async def _legacy(
        self, record: Entity, output: PendingOutput, key: str, asked: Fingerprints
    ) -> SendReceipt:
        """A record under the raw key, written by the previous version or by this one with
        BUS_INGRESS_KEY_SCOPES off: honoured for the kind of sender that wrote it and the same
        message as far as the record tells (its fingerprint, when it has one); otherwise the
        key is refused (the module's docstring)."""
        if not self.legacy or not _legacy_matches(record, self.sender, output):
            raise IdempotencyKeyReused(_reused(key))
        if record.get("fingerprint") is not None:
            return await self._same(record, key, asked)
        return await self._resend(record, key)


def _seconds(delay: timedelta | None) -> float | None:
    return None if delay is None else delay.total_seconds()


def _instant_or_none(moment: datetime | None) -> str | None:
    """One text per instant: 09:00+00:00 and 10:00+01:00 are the same due time."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat() if moment.tzinfo is not None else moment.isoformat()


def _reused(key: str) -> str:
    return (
        f"idempotency key {key!r} was already used for a different message (type, "
        "destination, body or due time) within the ingress window; send a new message "
        "under a new key"
    )


def _legacy_matches(record: Entity, sender: str, output: PendingOutput) -> bool:
    """Whether a record without a scope (written by the previous version, which kept no
    fingerprint) may answer this send: written by this kind of sender, for this type, to
    this destination (a command) or to recipients of this type (an event). The type by any
    of its names: a version of the app before a rename recorded its former name."""
    names = type_names(type(output.message))
    if record.get("sender") != sender or record.get("type") not in names:
        return False
    outgoing = _outgoing(record)
    if any(o.type not in names for o in outgoing):
        return False
    if output.to is None:
        return True
    return [o.destination for o in outgoing] == [output.to]


def ingress_version(entity: Entity) -> int:
    """The format version of an ingress record (``shared.bus.formats``)."""
    return property_version(entity.properties, f"ingress record {entity.partition_key!r}")


def _expires(entity: Entity) -> datetime:
    value = entity["expires_at"]
    if not isinstance(value, datetime):
        raise CorruptRecord(
            f"ingress row {entity.partition_key!r}/{entity.row_key!r}: expires_at {value!r}"
        )
    return value


def recorded_signals(entity: Entity) -> tuple[OutgoingSignal, ...]:
    """The signals an ingress record lists: one per message its send created."""
    return _outgoing(entity)


def _outgoing(entity: Entity) -> tuple[OutgoingSignal, ...]:
    return decode_signals(str(entity["outgoing"]))
