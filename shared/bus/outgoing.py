"""Outgoing dispatch shared by the receive pipeline and client (ingress) sends: build the
envelopes, create one token per delivery with an at-most-once attempt id, and signal."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field

from shared.bus.config import BusConfig
from shared.bus.context import PendingOutput
from shared.bus.deliveries import OutgoingSignal, encode_signals
from shared.bus.envelope import (
    DIGEST_CHARS,
    MAX_INLINE_ENVELOPE_CHARS,
    MAX_SIGNAL_CHARS,
    SIGNAL_ROOM_CHARS,
    Envelope,
    Signal,
    token_name,
)
from shared.bus.formats import metadata_fields, stated
from shared.bus.ids import derived_id
from shared.bus.messages import Event, body_of, checked_partition_key, topics_of
from shared.bus.payloads import share, write_payloads
from shared.bus.records import caused_by
from shared.bus.routes import Routes
from shared.bus.schedule import queue_delay, send_hidden
from shared.bus.telemetry import current as current_telemetry
from shared.bus.telemetry import trace_headers, within
from shared.bus.topics import RecipientLists
from shared.clock import to_datetime
from shared.concurrency import each
from shared.errors import AlreadyExists, MessageTooLarge, NotFound, OutcomeUnknown
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.names import MAX_ENTITY_BYTES, utf16_size

log = logging.getLogger(__name__)

UNCLAIMED = {"claim": ""}
ORIGIN_METADATA = "origin"
DUE_METADATA = "due"
TYPE_METADATA = "type"
"""A delayed token's message type, for the console's next due (which reads no token)."""
DESTINATION_METADATA = "to"
"""A delayed token's destination, for the console's next due."""
MAX_LABEL_CHARS = 200


def due_labels(envelope: Envelope) -> dict[str, str]:
    """The type and destination a delayed token keeps in its metadata, where they are short
    printable ASCII (blob metadata is ASCII); the console shows what is there."""
    labels = {TYPE_METADATA: envelope.type, DESTINATION_METADATA: envelope.destination}
    return {
        key: value
        for key, value in labels.items()
        if value.isascii() and value.isprintable() and 0 < len(value) <= MAX_LABEL_CHARS
    }


async def plan_deliveries(
    outputs: list[PendingOutput],
    *,
    sender: str,
    incoming_id: str,
    correlation_id: str,
    topics: RecipientLists,
    routes: Routes,
    config: BusConfig,
) -> list[Envelope]:
    """Expand sends and publishes into one envelope per destination, with deterministic
    message ids. Every destination is checked against the app's ``routes`` first
    (UndeliverableMessage before anything is written); an event whose topic has no
    subscriber is dropped and recorded (``shared.bus.unsubscribed``)."""
    deliveries: list[Envelope] = []
    created_at = to_datetime(config.clock())
    for index, output in enumerate(outputs):
        message = output.message
        destinations, headers = await _destinations(output, sender, topics, routes)
        # The bus's trace context wins over a handler's header of the same name.
        # A new dict: ``headers`` may be the handler's own, which a replay compares.
        headers = {**headers, **(trace_headers() if output.trace is None else output.trace)}
        if not destinations:
            continue
        first = Envelope(
            v=stated(config.wire_format),
            id=derived_id(incoming_id, "out", index, destinations[0]),
            type=message.type_name(),
            kind=message.kind,
            source=sender,
            destination=destinations[0],
            partition_key=output.partition_key or checked_partition_key(message),
            correlation_id=correlation_id,
            causation_id=incoming_id,
            created_at=created_at,
            headers=headers,
            body=body_of(message),
            deliver_at=output.deliver_at,
            type_version=message.version if message.version > 1 else None,
        )
        # The other destinations' envelopes are copies that differ in id and destination
        # only: the body is validated once and is one object, which ``share`` relies on.
        deliveries.append(first)
        deliveries += [
            first.model_copy(
                update={"id": derived_id(incoming_id, "out", index, d), "destination": d}
            )
            for d in destinations[1:]
        ]
    check_deliveries(deliveries, sender, incoming_id, config)
    return deliveries


OUTBOX_MARGIN_BYTES = 64 * 1024
"""What an outbox record holds besides its signals (ids, times, the attempt ids abandoned by
creates whose outcome was unknown), kept free within the entity."""


def check_deliveries(
    deliveries: list[Envelope], sender: str, incoming_id: str, config: BusConfig
) -> None:
    """Refuse, before any token is created, deliveries that the outbox record (O(m), a
    window mode's processed row, an ingress record) or the audit row could not list: more
    than ``max_deliveries``, or lists that would take either row past Table Storage's 1 MiB
    entity. Counted on every store, so that an endpoint behaves alike on each."""
    if len(deliveries) > config.max_deliveries:
        raise MessageTooLarge(
            f"{len(deliveries)} deliveries (events counted once per subscriber) exceed "
            f"BUS_MAX_DELIVERIES={config.max_deliveries} per incoming message"
        )
    signals = stand_in_signals(deliveries, sender, incoming_id)
    for row, size in (
        ("an outbox record", utf16_size(encode_signals(signals))),
        ("an audit row", utf16_size(json.dumps(caused_by(signals)))),
    ):
        if size > MAX_ENTITY_BYTES - OUTBOX_MARGIN_BYTES:
            raise MessageTooLarge(
                f"{len(deliveries)} deliveries need {row} of about {size:,} bytes; Table "
                f"Storage holds {MAX_ENTITY_BYTES:,} bytes an entity: publish to fewer "
                "subscribers per message, or with shorter names and partition keys"
            )


def stand_in_signals(
    deliveries: list[Envelope], sender: str, incoming_id: str
) -> list[OutgoingSignal]:
    """The signals the deliveries' records would list, as large as the real ones: every
    attempt id and digest has one length, so stand-ins measure the real ones."""
    attempt, digest = incoming_id, "x" * DIGEST_CHARS
    return [
        OutgoingSignal(
            destination=envelope.destination,
            message_id=envelope.id,
            attempt_id=attempt,
            token=f"{sender}/{incoming_id}/{attempt}/{envelope.id}/{digest}",
            partition_key=envelope.partition_key,
            type=envelope.type,
            deliver_at=envelope.deliver_at,
        )
        for envelope in deliveries
    ]


async def _destinations(
    output: PendingOutput, sender: str, topics: RecipientLists, routes: Routes
) -> tuple[tuple[str, ...], dict[str, str]]:
    """Where one output goes, checked, and the headers its envelopes carry."""
    message = output.message
    type_name = message.type_name()
    if output.to is not None:
        routes.check_send(sender, output.to, type_name)
        return (output.to,), output.headers
    if not isinstance(message, Event):
        raise TypeError(f"{type_name} is a command: it needs a destination")
    topic = message.topic()
    subscribers = await _recipients(message, sender, topics, routes)
    if not subscribers:
        await topics.unsubscribed.record(topic, type_name, sender, routes.takers_of(topic))
    return subscribers, {**output.headers, "topic": topic}


async def _recipients(
    event: Event, sender: str, topics: RecipientLists, routes: Routes
) -> tuple[str, ...]:
    """The subscribers of the event's topic and of its former topics (``Event.former_topics``:
    endpoints of an older version subscribed under its old name), each once, checked."""
    recipients: dict[str, None] = {}
    for topic in topics_of(type(event)):
        for subscriber in await topics.subscribers(topic):
            routes.check_subscriber(sender, topic, subscriber, event.type_name())
            recipients[subscriber] = None
    return tuple(recipients)


@dataclass(frozen=True)
class SignalHint:
    """What the creator of a token knows about it without reading it (``Signal.etag`` and
    ``Signal.envelope``). Kept in memory only: outbox records stay small."""

    etag: str
    envelope: str


Hints = dict[str, SignalHint]
"""Token name -> hint, for the tokens an invocation created itself."""


@dataclass
class CreatedTokens:
    committed_candidates: list[OutgoingSignal]
    abandoned: list[str]
    """Token names whose create had an unknown outcome: they may land later, so they are
    never signalled and are recorded for the cleanup to delete after the grace period."""
    hints: Hints = field(default_factory=dict)


async def create_tokens(
    tokens: BlobContainer,
    deliveries: list[Envelope],
    *,
    payloads: BlobContainer,
    sender: str,
    incoming_id: str,
    config: BusConfig,
    origin: str = "",
) -> CreatedTokens:
    """Create one token per delivery, at most ``config.send_concurrency`` at once. A create
    whose outcome is unknown abandons its attempt id for good and tries a new one: an attempt
    id is only ever committed if its create succeeded on a single request.

    ``origin`` (see ``shared.bus.origin``) names the record whose commit decides whether the
    token is ever signalled; it is stored in the token's metadata so the cleanup can tell an
    abandoned token from one in flight without knowing the sender's partition.

    A body several deliveries share is written once to ``payloads`` first, and their tokens
    refer to it (``shared.bus.payloads``).

    The result lists the signals and the abandoned names in the deliveries' order, whatever
    order the creates finished in: the records that store them, and the simulator's replays,
    see one order."""
    common = {**UNCLAIMED, **metadata_fields(config.wire_format)}
    if origin:
        common[ORIGIN_METADATA] = origin
    deliveries = await _write_shared_payloads(
        payloads, deliveries, sender=sender, incoming_id=incoming_id, config=config, origin=origin
    )
    created: list[OutgoingSignal] = []  # every token created so far: what a failed round discards

    async def create(envelope: Envelope) -> _Created:
        metadata = common
        if envelope.deliver_at is not None:
            # For the cleanup, which lists tokens without reading them: a delayed token
            # is in flight until its due time, and its grace period counts from then.
            metadata = {
                **common,
                DUE_METADATA: envelope.deliver_at.isoformat(),
                **due_labels(envelope),
            }
        with within(config.telemetry.creating(envelope)):
            return await _create_token(
                tokens, envelope, sender, incoming_id, config, metadata, created
            )

    try:
        outcomes = await each(asyncio.Semaphore(config.send_concurrency), deliveries, create)
    except Exception:
        # Tokens this round created are never going to be committed: remove them now (their
        # creation succeeded, so no late copy can appear). Crashes skip this, and so do the
        # creates cancelled in flight when another failed (their outcome is unknown); the
        # cleanup finds such leftovers under the sender-scoped prefix.
        await discard_tokens(tokens, created)
        raise
    result = CreatedTokens([], [])
    for outcome in outcomes:
        result.abandoned.extend(outcome.abandoned)
        result.committed_candidates.append(outcome.signal)
        if outcome.hint is not None:
            result.hints[outcome.signal.token] = outcome.hint
    return result


async def _write_shared_payloads(
    payloads: BlobContainer,
    deliveries: list[Envelope],
    *,
    sender: str,
    incoming_id: str,
    config: BusConfig,
    origin: str,
) -> list[Envelope]:
    """The envelopes the tokens carry, once the bodies they share are written (before any
    token refers to them; every round rewrites them, see ``write_payloads``)."""
    envelopes, shared = share(deliveries, config.shared_payload_min_chars)
    metadata = {ORIGIN_METADATA: origin} if origin else {}
    await write_payloads(
        payloads, shared, sender=sender, incoming_id=incoming_id, metadata=metadata
    )
    return envelopes


@dataclass(frozen=True)
class _Created:
    """One delivery's token: its signal, its hint, and the names its failed attempts left."""

    signal: OutgoingSignal
    hint: SignalHint | None
    abandoned: list[str]


async def _create_token(
    tokens: BlobContainer,
    envelope: Envelope,
    sender: str,
    incoming_id: str,
    config: BusConfig,
    metadata: dict[str, str],
    created: list[OutgoingSignal],
) -> _Created:
    data = envelope.to_bytes()
    # A character takes at most 4 bytes: only an envelope that may fit the signal is decoded.
    text = data.decode("utf-8") if len(data) <= 4 * MAX_INLINE_ENVELOPE_CHARS else None
    abandoned: list[str] = []
    for _ in range(config.max_create_attempts):
        attempt_id = config.new_id()
        name = token_name(sender, incoming_id, attempt_id, envelope.id, data)
        try:
            etag = await tokens.create(name, data, metadata)
        except (OutcomeUnknown, AlreadyExists):
            abandoned.append(name)
            continue
        signal = OutgoingSignal.for_token(envelope, attempt_id, name)
        created.append(signal)
        hint = None
        if text is not None and len(text) <= MAX_INLINE_ENVELOPE_CHARS:
            hint = SignalHint(etag, text)
        return _Created(signal, hint, abandoned)
    raise OutcomeUnknown(
        f"could not create a token for {envelope.id} in {config.max_create_attempts} attempts"
    )


async def discard_tokens(tokens: BlobContainer, created: list[OutgoingSignal]) -> None:
    for signal in created:
        try:
            await tokens.delete(signal.token)
        except NotFound:
            pass
        except OutcomeUnknown:
            log.warning("could not discard uncommitted token %s; cleanup will", signal.token)


async def send_signals(
    account: StorageAccount,
    outgoing: tuple[OutgoingSignal, ...],
    hints: Hints | None = None,
    *,
    config: BusConfig,
) -> None:
    """R6: at least once; a repeated signal is harmless because its token is claimed once.
    ``hints`` (tokens this invocation created) let the receiver skip reading the token. A
    delayed message's signal is hidden until its due time by the bus's clock (at most 7
    days: the receiver hides it again for the rest, ``shared.bus.schedule``), never a
    default clock: a caller on another clock would send a delayed signal visible. At most
    ``config.send_concurrency`` sends are in flight; the first failure ends the round (the
    signals are sent again when R6 is resumed from the record)."""

    async def send(out: OutgoingSignal) -> None:
        hint = (hints or {}).get(out.token)
        signal = Signal(
            v=stated(config.wire_format),
            message_id=out.message_id,
            attempt_id=out.attempt_id,
            token=out.token,
            partition_key=out.partition_key,
            etag=None if hint is None else hint.etag,
            envelope=None if hint is None else hint.envelope,
        )
        text = signal.to_json()
        if len(text) > MAX_SIGNAL_CHARS - SIGNAL_ROOM_CHARS:
            # An envelope copy within its limit may still take the signal past what receivers
            # accept once JSON escapes its quotes: it goes without, and the token is read.
            text = signal.model_copy(update={"etag": None, "envelope": None}).to_json()
        queue = account.queue(out.destination)
        with within(current_telemetry().sending(out.destination, out.message_id)):
            await send_hidden(queue, text, queue_delay(out.deliver_at, config.clock))

    await each(asyncio.Semaphore(config.send_concurrency), outgoing, send)
