"""What every receive pipeline shares, whatever its deduplication mode.

Signal parsing and poison parking, reading and decoding the incoming token, running the
handler with its deterministic context, and building the audit row. A mode adds only its own
deduplication and commit (``_process``): token mode in ``shared.bus.receiver``, the others in
``shared.bus.modes``, each running its rounds with ``shared.bus.rounds`` and creating its
outputs with ``Pipeline._create_outputs``.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import enum
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from shared.bus.app import Endpoint, call_handler
from shared.bus.budget import BodyBudget, BodyBudgetExhausted, Holding
from shared.bus.config import BusConfig
from shared.bus.context import HandlerContext
from shared.bus.envelope import Envelope, Signal, bus_message_id
from shared.bus.formats import metadata_version
from shared.bus.giveback import (
    afresh_text,
    count_of,
    describe,
    given_back_text,
    kind_of,
    next_step,
    parking_reason,
)
from shared.bus.messages import Message
from shared.bus.origin import Origin
from shared.bus.outgoing import CreatedTokens, create_tokens, plan_deliveries
from shared.bus.payloads import resolve
from shared.bus.poison import Reason, error_reason, park, utc_time
from shared.bus.reading import check_readable, read_body
from shared.bus.records import STATE_ROW, AuditRecord, OutgoingSignal, caused_by
from shared.bus.retries import RetryPolicy
from shared.bus.schedule import NotYetDue, not_due, reschedule, send_hidden
from shared.bus.state.base import EndpointState
from shared.bus.state.rows import TableRows
from shared.bus.telemetry import Receiving
from shared.bus.topics import RecipientLists
from shared.clock import to_datetime
from shared.errors import (
    InvalidName,
    LimitExceeded,
    MalformedSignal,
    MessageSchemaError,
    NewerVersion,
    NotFound,
    PayloadMissing,
    PermanentFailure,
    TooLarge,
    UnknownMessageType,
)
from shared.logsafe import REASON_CHARS, problems, shown
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob
from shared.stores.names import check_key
from shared.stores.table import Entity

log = logging.getLogger("shared.bus.receiver")

ENVELOPE_FIELDS_BYTES = 64 * 1024
"""Room for a token's envelope fields beside its body (ids, type, headers, times), in the
reservation made before a token of unknown size is read."""
MIN_POSTPONE_SECONDS = 1.0
"""The shortest a postponed message is hidden: long enough for a worker to finish something."""


class Outcome(enum.Enum):
    PROCESSED = "processed"
    """This invocation ran the handler and committed its effects."""
    RESUMED = "resumed"
    """The effects were already committed (by an earlier or concurrent copy); this
    invocation finished sending and deleting. Nothing was committed again."""
    DUPLICATE = "duplicate"
    """The token was already gone: an earlier copy finished everything."""
    POISONED = "poisoned"
    ANOMALY = "anomaly"
    RETRYING = "retrying"
    """The handler failed; by the endpoint's retry policy the signal was sent again, hidden
    for a delayed retry, and this copy may be acknowledged (``shared.bus.retries``)."""
    DEFERRED = "deferred"
    """The message is not due yet (a delayed message): its signal was sent again, hidden
    until its due time, and nothing else was written (``shared.bus.schedule``)."""
    GIVEN_BACK = "given_back"
    """The message was written by a newer version than this instance (``NewerVersion``): its
    signal was sent again, hidden for a while, for an upgraded instance, and nothing else was
    written (``shared.bus.giveback``)."""
    POSTPONED = "postponed"
    """The worker's body budget had no room for the message's body within
    ``BusConfig.body_budget_wait_seconds``: its signal was sent again, hidden for as long,
    and this copy may be acknowledged. Not a failure: no try is counted, nothing is parked
    (``shared.bus.budget``)."""
    NONDETERMINISTIC = "nondeterministic"
    """State-based mode: replaying a duplicate on the restored state produced other outputs
    or another state than the committed run. The committed effects stand (they were sent,
    once); the handler must be fixed. See ``shared.bus.modes.errors.NondeterministicHandler``."""


@dataclass
class IncomingToken:
    name: str
    etag: str
    claim: str
    envelope_bytes: bytes

    @classmethod
    def of(cls, blob: Blob) -> IncomingToken:
        """The token as read, once its metadata's format is one this instance reads (a
        newer one is NewerVersion: nothing of it is used)."""
        name = blob.properties.name
        metadata_version(blob.metadata, f"token {shown(name)}")
        return cls(name, blob.etag, blob.metadata.get("claim", ""), blob.data)


def queue_text(body: bytes) -> str:
    """A queue message's bytes as the text ``receive`` takes. Bytes that are not UTF-8 are
    handed on as their base64 form, as the local host's queue adapter does, so that they are
    parked whole with their reason: no crash, and not a byte lost to replacement characters."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii")


@dataclass
class Incoming:
    """A message as its token holds it, decoded and checked. Its body is inline (``message``
    read already) or a shared payload, read by ``Pipeline._body`` only when the handler is
    about to run (docs/design.md, shared payloads)."""

    token: str
    """The token's name, which the payload's name derives from."""
    envelope: Envelope
    model: type[Message]
    delivery: Delivery
    """The delivery it came with, whose budget holding its payload joins."""
    message: Message | None = None
    """None until the body is read: a shared payload's before ``Pipeline._body``."""


@dataclass
class Delivery:
    """One queue message being received, passed through the pipeline: its text as given, which
    try this is, when its queue message was inserted (when the caller knows) and when this try
    started; then what is learnt on the way: its signal and id once parsed, its type once the
    envelope is decoded. For its log line, poison reason and receive span."""

    raw: str
    dequeue_count: int
    enqueued_at: datetime | None
    started: float
    """``time.monotonic()`` when this try began, for its log line's duration."""
    trace: Receiving
    """Its receive span, which ``_decode`` starts in the trace of the envelope."""
    holding: Holding
    """What it holds of the worker's body budget, released when its try ends."""
    signal: Signal | None = None
    message_id: str | None = None
    message_type: str | None = None


class Pipeline(abc.ABC):
    """One endpoint's receive pipeline. Stateless between messages; safe to share."""

    mode: str

    def __init__(
        self,
        endpoint: Endpoint[Any],
        account: StorageAccount,
        topics: RecipientLists,
        config: BusConfig,
        *,
        state: EndpointState | None = None,
        budget: BodyBudget | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.budget = budget or BodyBudget(config.body_budget)
        """The worker's body budget, shared by all its pipelines and its ingress (``Bus``)."""
        self.account = account
        self.config = config
        self.topics = topics
        self.tokens = account.blob_container(config.tokens_container)
        self.payloads = account.blob_container(config.payloads_container)
        self.table = account.table(endpoint.name)
        self.state_store = state or EndpointState(TableRows(self.table))
        """Token mode's state, O(m) and audit rows, in whichever store the endpoint uses."""

    async def receive(
        self, raw: str, dequeue_count: int = 1, *, enqueued_at: datetime | None = None
    ) -> Outcome:
        """Process one queue message. Returns normally when the message may be acknowledged;
        raises when the host should redeliver it (handler errors, storage outages), except
        on the last delivery (``BusConfig.max_dequeue_count``), where the message is parked
        with its last error instead, and for a ``PermanentFailure``, parked on the try that
        hit it (docs/retries.md). Logs one line per message with its outcome.
        ``enqueued_at`` (the queue message's insertion time) goes into a poison reason."""
        started = time.monotonic()
        trace = self.config.telemetry.receiving(
            self.endpoint.name, self.mode, dequeue_count, self.config.clock
        )
        delivery = Delivery(raw, dequeue_count, enqueued_at, started, trace, Holding(self.budget))
        with trace:
            try:
                outcome = await self._receive_retrying(delivery)
            except Exception as error:
                outcome = await self._failed(delivery, error)
            trace.outcome = outcome.value
        log.info(
            "endpoint=%s type=%s message_id=%s outcome=%s duration_ms=%.1f try=%d",
            self.endpoint.name,
            shown(delivery.message_type or "-", 100),
            shown(delivery.message_id or "-", 100),
            outcome.value,
            (time.monotonic() - delivery.started) * 1000,
            delivery.dequeue_count,
        )
        return outcome

    async def _receive_retrying(self, delivery: Delivery) -> Outcome:
        """``_receive``, run again at once after an error as often as the message's retry
        policy says. A failed round committed nothing, so a retry is what a redelivery is:
        it finds its own O(m) and claim and carries on."""
        retried = 0
        while True:
            try:
                return await self._receive(delivery)
            except PermanentFailure:
                raise
            except Exception as error:
                policy = self.endpoint.retry_policy(delivery.message_type)
                if policy is None or retried >= policy.immediate:
                    raise
                retried += 1
                log.warning(
                    "endpoint=%s message_id=%s: immediate retry %d of %d after %s: %s",
                    self.endpoint.name,
                    shown(delivery.message_id or "-", 100),
                    retried,
                    policy.immediate,
                    type(error).__name__,
                    shown(error),
                )

    async def _receive(self, delivery: Delivery) -> Outcome:
        try:
            signal = Signal.parse(delivery.raw)
            check_key("PartitionKey", signal.partition_key)
        except NewerVersion as e:  # a signal format newer than this instance reads
            return await self._give_back_unparsed(delivery, e)
        except (MalformedSignal, InvalidName) as e:
            return await self._poison(delivery, str(e), type(e).__name__)
        except RecursionError:  # JSON nested deeper than the parser goes
            return await self._poison(delivery, "signal is nested too deeply", "MalformedSignal")
        delivery.message_id = signal.message_id
        delivery.signal = signal
        try:
            return await self._process(signal, delivery)
        except BodyBudgetExhausted as e:
            return await self._postpone(delivery, e)
        except NewerVersion as e:  # before parking: a newer version's message is not hostile
            return await self._give_back(delivery, e, signal, signal.given_back or 0)
        except (MalformedSignal, MessageSchemaError) as e:
            return await self._poison(delivery, str(e), type(e).__name__)
        except NotYetDue as early:
            await reschedule(
                self.account.queue(self.endpoint.name), delivery.raw, early.due, self.config.clock
            )
            return Outcome.DEFERRED
        except PayloadMissing:
            # The payload goes only once no token refers to it: if the token is gone too, an
            # earlier copy processed the message. If not, give the message back. Only its
            # existence is asked: no body is read, so no budget is taken.
            if not await self._token_exists(signal):
                return Outcome.DUPLICATE
            raise
        finally:
            await delivery.holding.release_all()

    async def _postpone(self, delivery: Delivery, error: BodyBudgetExhausted) -> Outcome:
        """Give the message back for later, as it is: the budget frees up as the invocations
        holding it end. Its text is sent again unchanged (no try counted, no give-back count:
        a busy worker is no fault of the message's), hidden for the wait, and this copy may
        be acknowledged; a send that fails raises, and the host delivers it again."""
        delay = max(self.config.body_budget_wait_seconds, MIN_POSTPONE_SECONDS)
        await send_hidden(self.account.queue(self.endpoint.name), delivery.raw, delay)
        log.warning(
            "endpoint %s: message %s postponed for %.0f s: %s",
            self.endpoint.name,
            shown(delivery.message_id or "-", 100),
            delay,
            error,
        )
        return Outcome.POSTPONED

    async def _give_back_unparsed(self, delivery: Delivery, error: NewerVersion) -> Outcome:
        """Give back a signal too new to parse: its text, with only its count set."""
        delivery.message_id = bus_message_id(delivery.raw)  # what it claims, for the log line
        try:
            data, count = count_of(delivery.raw)
        except MalformedSignal as e:
            return await self._poison(delivery, str(e), type(e).__name__)
        return await self._give_back(delivery, error, data, count)

    async def _give_back(
        self,
        delivery: Delivery,
        error: NewerVersion,
        signal: Signal | dict[str, object],
        count: int,
    ) -> Outcome:
        """Send the signal again hidden for the next delay and let this copy be acknowledged,
        or park it once the give-back window is used up (``shared.bus.giveback``). A send that
        fails raises: the host delivers the message again."""
        step = next_step(count, self.config.give_back_seconds)
        if step.delay is None:
            reason = parking_reason(error, step, count)
            raw = afresh_text(delivery.raw, signal)
            return await self._poison(delivery, reason, type(error).__name__, raw=raw)
        queue = self.account.queue(self.endpoint.name)
        await send_hidden(queue, given_back_text(signal, count + 1), step.delay)
        log.warning(
            "endpoint %s: %s",
            self.endpoint.name,
            describe(delivery.message_id, error, count + 1, step.delay),
        )
        delivery.trace.given_back = kind_of(error)
        return Outcome.GIVEN_BACK

    async def _failed(self, delivery: Delivery, error: Exception) -> Outcome:
        """Park the message at once (a ``PermanentFailure``: ``DoNotRetry``, a limit), schedule
        its next delayed retry or park it when they are used up (a retry policy), or else give
        it back to the host and park it with the error on the host's last try."""
        if isinstance(error, PermanentFailure):
            return await self._park_failed(delivery, delivery.raw, error, "not retried")
        policy = self.endpoint.retry_policy(delivery.message_type)
        if policy is not None and delivery.signal is not None:
            outcome = await self._retry_later(policy, delivery, error)
            if outcome is not None:
                return outcome
        last = self.config.max_dequeue_count
        if last is None or delivery.dequeue_count < last:
            # The host logs the error with its traceback; the note says which message it was.
            error.add_note(self._where(delivery))
            raise error
        return await self._park_failed(delivery, delivery.raw, error)

    async def _retry_later(
        self, policy: RetryPolicy, delivery: Delivery, error: Exception
    ) -> Outcome | None:
        """Send the signal again, hidden for the policy's next backoff, or park it once the
        delayed retries are used up. None when the signal could not be sent: the host then
        retries as without a policy. (Why sending and then acknowledging is safe:
        ``shared.bus.retries``.)"""
        signal = delivery.signal
        if signal is None:
            return None
        done = signal.retry or 0
        afresh = signal.model_copy(update={"retry": None}).to_json()
        delay = policy.delay(done, self.config.jitter)
        if delay is None:
            note = f"after {policy.describe(done)}"
            return await self._park_failed(delivery, afresh, error, note)
        again = signal.model_copy(update={"retry": done + 1}).to_json()
        try:
            await send_hidden(self.account.queue(self.endpoint.name), again, delay)
        except Exception as sending:
            log.warning(
                "endpoint %s: delayed retry of %s not scheduled (%s); the host retries it",
                self.endpoint.name,
                shown(signal.message_id),
                shown(sending),
            )
            return None
        log.warning(
            "%s failed: %s: %s; delayed retry %d of %d in %.0f s",
            self._where(delivery),
            type(error).__name__,
            shown(error),
            done + 1,
            len(policy.delays),
            delay,
        )
        return Outcome.RETRYING

    def _where(self, delivery: Delivery) -> str:
        return (
            f"receiving message {shown(delivery.message_id or '(no id)', 100)} of type "
            f"{shown(delivery.message_type or '(not decoded)', 100)} at endpoint "
            f"{self.endpoint.name}, "
            f"try {delivery.dequeue_count}"
        )

    async def _park_failed(
        self, delivery: Delivery, raw: str, error: Exception, note: str = ""
    ) -> Outcome:
        """Park ``raw`` (the delivery's text, or its signal afresh) with ``error`` (and
        ``note``, why now) as its reason."""
        where = self._where(delivery)
        log.error("%s failed: %s: %s", where, type(error).__name__, shown(error), exc_info=error)
        reason = error_reason(
            self.endpoint.name,
            error,
            delivery.dequeue_count,
            message_id=delivery.message_id,
            message_type=delivery.message_type,
            enqueued_at=delivery.enqueued_at,
            failed_at=to_datetime(self.config.clock()),
        )
        reason = replace(reason, reason=shown(reason.reason, REASON_CHARS))
        if note:
            reason = replace(reason, reason=f"{reason.reason} ({note})")
        await self._park(raw, reason)
        return Outcome.POISONED

    @contextlib.contextmanager
    def _within_limits(self) -> Iterator[None]:
        """Around building and committing a round's rows: a storage limit they hit becomes
        ``LimitExceeded``, which parks the message at once. Their sizes are fixed by the
        message and the state it finds (the handler is deterministic), so a retry would hit
        the limit again. Parking is safe because a refused commit wrote nothing: the size
        checks run before any request is sent, Table Storage applies a transaction's
        operations all or none (a 413 or 'EntityTooLarge' refuses the whole batch), and
        PostgreSQL rolls the transaction back. A limit hit anywhere else (after the commit,
        or by a write whose size the message does not fix) stays an ordinary, retried
        error."""
        try:
            yield
        except TooLarge as e:
            raise LimitExceeded(
                f"endpoint {self.endpoint.name} cannot commit this message: {e}"
            ) from e

    @abc.abstractmethod
    async def _process(self, signal: Signal, delivery: Delivery) -> Outcome:
        """Deduplicate, run, commit and signal ``delivery``'s ``signal``: the mode's own
        part."""

    async def _poison(
        self, delivery: Delivery, reason: str, error_type: str, *, raw: str | None = None
    ) -> Outcome:
        """Park ``raw`` (by default the delivery's text) with ``reason``."""
        reason = shown(reason, REASON_CHARS)
        log.error(
            "endpoint %s: parking message %s in poison queue: %s",
            self.endpoint.name,
            shown(delivery.message_id or "-", 100),
            reason,
        )
        await self._park(
            delivery.raw if raw is None else raw,
            Reason(
                self.endpoint.name,
                reason,
                delivery.dequeue_count,
                error_type=error_type,
                message_id=delivery.message_id,
                message_type=delivery.message_type,
                enqueued_at=utc_time(delivery.enqueued_at),
                failed_at=utc_time(to_datetime(self.config.clock())),
            ),
        )
        return Outcome.POISONED

    async def _park(self, raw: str, reason: Reason) -> None:
        """Park ``raw``: whole, or, when it does not fit beside its reason, by reference only
        if it names a token that exists (its message must replay), else as an excerpt."""
        form = await park(
            self.account,
            raw,
            reason,
            self.config.parked_container,
            tokens=self.tokens,
            version=self.config.wire_format,
        )
        message = shown(reason.message_id or "-", 100)
        if form == "reference":
            log.error(
                "endpoint %s: message %s too large to park beside its reason; original kept "
                "in container %s",
                self.endpoint.name,
                message,
                self.config.parked_container,
            )
        elif form == "excerpt":
            log.error(
                "endpoint %s: refused text too large to park beside its reason names no "
                "token (message %s); parked as an excerpt and its SHA-256",
                self.endpoint.name,
                message,
            )

    async def _read_token(self, signal: Signal, delivery: Delivery) -> IncomingToken | None:
        """token(a), read within the body budget: its size is unknown until it is read, so
        room for the largest token is taken first, and the token holds its real size once
        read (nothing once found gone)."""
        await self._hold(delivery, "token", self._largest_token)
        try:
            blob = await self.tokens.read(signal.token)
        except NotFound:
            await delivery.holding.resize("token", 0)
            return None
        await delivery.holding.resize("token", len(blob.data))
        return IncomingToken.of(blob)

    async def _token_exists(self, signal: Signal) -> bool:
        try:
            await self.tokens.get_properties(signal.token)
        except NotFound:
            return False
        return True

    @property
    def _largest_token(self) -> int:
        return self.config.max_payload_bytes + ENVELOPE_FIELDS_BYTES

    async def _hold(self, delivery: Delivery, slot: str, size: int) -> None:
        """Hold ``size`` bytes of the body budget for ``slot`` of ``delivery``, waiting for
        room at most ``BusConfig.body_budget_wait_seconds``; BodyBudgetExhausted if none
        came (the message is then postponed)."""
        wait = self.config.body_budget_wait_seconds
        if not await delivery.holding.take(slot, size, wait):
            raise BodyBudgetExhausted(
                f"no room for {size:,} bytes of its {slot} in the worker's body budget "
                f"({self.budget.held:,} of {self.budget.capacity:,} bytes held) within "
                f"{wait:g} s"
            )

    async def _decode(self, signal: Signal, token: IncomingToken, delivery: Delivery) -> Incoming:
        """The token's envelope, checked against the signal and this endpoint, and its message
        when the body is inline. A shared payload is not read here: ``_body`` reads it once the
        handler is about to run, so that a duplicate or a forged copy reads nothing of it."""
        try:
            envelope = Envelope.from_bytes(token.envelope_bytes)
        except ValidationError as e:
            raise MalformedSignal(
                f"token {signal.token} does not hold an envelope: {problems(e, 'envelope')}"
            ) from None
        delivery.message_type = envelope.type
        if envelope.id != signal.message_id or envelope.partition_key != signal.partition_key:
            raise MalformedSignal(
                f"token {signal.token} holds message {envelope.id} for "
                f"partition {envelope.partition_key!r}, not what the signal says"
            )
        delivery.trace.begin(envelope)  # the signal's message: its trace from here on
        if envelope.destination != self.endpoint.name:
            raise MalformedSignal(
                f"message {envelope.id} is addressed to "
                f"{envelope.destination}, not {self.endpoint.name}"
            )
        # Checked on the token's own content, before anything is written: an early signal
        # (however it came) only hides itself again. Before the type is looked up, so that a
        # newer version's delayed message waits for its due time before its give-back window
        # starts.
        if (early := not_due(envelope.deliver_at, self.config.clock)) is not None:
            raise early
        found = self.endpoint.handler_for(envelope.type)
        if found is None:
            raise UnknownMessageType(
                f"endpoint {self.endpoint.name} has no handler for message type "
                f"{shown(envelope.type)!r} (message {shown(envelope.id)}); it handles "
                f"{sorted(self.endpoint.handlers)}"
            )
        incoming = Incoming(signal.token, envelope, found[0], delivery)
        if envelope.payload is None:
            incoming.message = self._read_message(incoming)
        else:
            # A newer version's body waits for an upgraded instance before its payload is
            # read, as an inline one does.
            check_readable(incoming.model, envelope.body_version)
        return incoming

    async def _body(self, incoming: Incoming) -> tuple[Envelope, Message]:
        """``incoming``'s envelope with its body inline, and its message: its shared payload
        read and checked (``shared.bus.payloads.resolve``) on the first call only. Called
        when the handler is about to run: after token mode's claim (R4), after a window
        mode's duplicate check."""
        if incoming.message is None:
            reference = incoming.envelope.payload
            if reference is not None:  # its size, from the token's own envelope
                await self._hold(incoming.delivery, "payload", reference.size)
            incoming.envelope = await resolve(self.payloads, incoming.token, incoming.envelope)
            incoming.message = self._read_message(incoming)
        return incoming.envelope, incoming.message

    def _read_message(self, incoming: Incoming) -> Message:
        envelope = incoming.envelope
        try:
            return read_body(
                incoming.model,
                envelope.body or {},
                type_version=envelope.body_version,
                reader=self.endpoint.name,
                telemetry=self.config.telemetry,
            )
        except MessageSchemaError as e:
            raise MessageSchemaError(
                f"message {shown(envelope.id)} of type {shown(envelope.type)} does not match "
                f"its schema: {e}"
            ) from None

    async def _run_handler(
        self,
        envelope: Envelope,
        message: Message,
        state: BaseModel,
        *,
        now: datetime,
        seed: int | None = None,
        sql: Any = None,
    ) -> HandlerContext[Any]:
        context: HandlerContext[Any] = HandlerContext(
            endpoint=self.endpoint.name,
            envelope=envelope,
            state=state,
            now=now,
            seed=seed,
            sql=sql,
            max_payload_bytes=self.config.max_payload_bytes,
            max_outputs=self.config.max_outputs,
            services=self.endpoint.routes.services,
        )
        _, handler = self.endpoint.handlers[self.endpoint.current_name(envelope.type)]
        with self.config.telemetry.handling(self.endpoint.name, self.mode, envelope):
            await call_handler(handler, context, message)
        return context

    async def _create_outputs(
        self,
        context: HandlerContext[Any],
        envelope: Envelope,
        origin_row: str,
        abandoned: list[str],
    ) -> CreatedTokens:
        """Create the tokens of the handler's sends, before the commit, each naming
        ``origin_row`` (the dedup row that will list it) as its origin; creates whose outcome
        is unknown go to ``abandoned``. Every mode creates its outputs here."""
        deliveries = await plan_deliveries(
            context.outputs,
            sender=self.endpoint.name,
            incoming_id=envelope.id,
            correlation_id=envelope.correlation_id,
            topics=self.topics,
            routes=self.endpoint.routes,
            config=self.config,
        )
        created = await create_tokens(
            self.tokens,
            deliveries,
            payloads=self.payloads,
            sender=self.endpoint.name,
            incoming_id=envelope.id,
            config=self.config,
            origin=Origin(self.endpoint.name, envelope.partition_key, origin_row).encode(),
        )
        abandoned.extend(created.abandoned)
        return created

    def _audit(
        self, envelope: Envelope, outgoing: Iterable[OutgoingSignal], processed_at: datetime
    ) -> AuditRecord:
        return AuditRecord(
            partition_key=envelope.partition_key,
            endpoint=self.endpoint.name,
            message_id=envelope.id,
            message_type=envelope.type,
            source=envelope.source,
            correlation_id=envelope.correlation_id,
            causation_id=envelope.causation_id,
            sent_at=envelope.created_at,
            processed_at=processed_at,
            mode=self.mode,
            caused=caused_by(outgoing),
        )

    def _load_state(self, data: str | None) -> BaseModel:
        state_type: type[BaseModel] = self.endpoint.state_type
        if data is None:
            return state_type()
        return state_type.model_validate_json(data)

    def _state_entity(self, partition_key: str, state: BaseModel, **extra: Any) -> Entity:
        """The ``state`` row every mode keeps its partition's business state in."""
        return Entity(
            partition_key,
            STATE_ROW,
            {"type": type(state).__name__, "data": state.model_dump_json(), **extra},
        )
