"""What every receive pipeline shares, whatever its deduplication mode.

Signal parsing, reading and decoding the incoming token, running the handler with its
deterministic context, and building the audit row. What happens to a delivery that fails
(retry, give back, defer, postpone, park) is decided in one place, ``shared.bus.failures``.
A mode adds only its own deduplication and commit (``_process``): token mode in
``shared.bus.receiver``, the others in ``shared.bus.modes``, each running its rounds with
``shared.bus.rounds`` and creating its outputs with ``Pipeline._create_outputs``.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from shared.bus.app import Endpoint, Handler, call_handler
from shared.bus.budget import BodyBudget, BodyBudgetExhausted, Holding
from shared.bus.config import BusConfig
from shared.bus.context import HandlerContext, SagaRole
from shared.bus.delivery import Delivery as Delivery
from shared.bus.delivery import Outcome as Outcome
from shared.bus.envelope import Envelope, Signal
from shared.bus.failures import Failures
from shared.bus.formats import metadata_version
from shared.bus.handles import CANCEL_TYPE
from shared.bus.messages import Message
from shared.bus.origin import Origin
from shared.bus.outgoing import CreatedTokens, create_tokens, plan_deliveries
from shared.bus.payloads import resolve
from shared.bus.reading import check_readable, read_body
from shared.bus.records import (
    STATE_ROW,
    AuditOutcome,
    AuditRecord,
    OutgoingSignal,
    caused_by,
)
from shared.bus.saga import SAGA_ROW_TYPE, PendingTimeout, SagaTurn, saga_turn
from shared.bus.schedule import not_due
from shared.bus.state.base import EndpointState, StateRow, StateWrite
from shared.bus.topics import RecipientLists
from shared.clock import to_datetime
from shared.errors import (
    CancelRefused,
    LimitExceeded,
    MalformedSignal,
    MessageSchemaError,
    NotFound,
    TooLarge,
    UnknownMessageType,
)
from shared.logsafe import problems, shown
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob
from shared.stores.names import check_key
from shared.stores.table import Entity

log = logging.getLogger("shared.bus.receiver")

ENVELOPE_FIELDS_BYTES = 64 * 1024
"""Room for a token's envelope fields beside its body (ids, type, headers, times), in the
reservation made before a token of unknown size is read."""


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
class Ran:
    """What a round's run at the partition's state leaves to commit
    (``Pipeline._run_at_state``)."""

    context: HandlerContext[Any] | None
    """The handler's context; None when no handler ran (a saga's message for no instance)."""
    created: CreatedTokens
    write: StateWrite | None
    """The state row to commit; None: the partition's state is left as it is."""
    outcome: Outcome

    @property
    def audit_outcome(self) -> AuditOutcome | None:
        return "saga_not_found" if self.outcome is Outcome.SAGA_NOT_FOUND else None


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
        state: EndpointState,
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
        self.state_store = state
        """Token mode's state, O(m) and audit rows, in whichever store the endpoint uses: its
        table in the state account, or PostgreSQL (``shared.bus.state.stores``); ``account``
        is the messaging account."""
        self.failures = Failures(endpoint, account, config, self.tokens)
        """What happens to a delivery that fails: the one place that decides it."""

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
            outcome = await self._outcome(delivery)
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

    async def _outcome(self, delivery: Delivery) -> Outcome:
        """``delivery`` received, or, when that fails, what the failure table decides
        (``shared.bus.failures``): which may be to receive it again at once. A failed round
        committed nothing, so a retry is what a redelivery is: it finds its own O(m) and
        claim and carries on."""
        retried = 0
        while True:
            try:
                outcome = await self._receive(delivery)
            except Exception as error:
                settled = await self.failures.settle(delivery, error, retried)
            else:
                self.failures.answered()
                return outcome
            if settled is not None:
                return settled
            retried += 1

    async def _receive(self, delivery: Delivery) -> Outcome:
        try:
            try:
                signal = Signal.parse(delivery.raw)
            except RecursionError:  # JSON nested deeper than the parser goes
                raise MalformedSignal("signal is nested too deeply") from None
            check_key("PartitionKey", signal.partition_key)
            delivery.message_id = signal.message_id
            delivery.signal = signal
            return await self._process(signal, delivery)
        finally:
            await delivery.holding.release_all()

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
        model = self._received_model(envelope.type)
        if model is None:
            raise UnknownMessageType(
                f"endpoint {self.endpoint.name} has no handler for message type "
                f"{shown(envelope.type)!r} (message {shown(envelope.id)}); it handles "
                f"{sorted(self.endpoint.handlers)}"
            )
        incoming = Incoming(signal.token, envelope, model, delivery)
        if envelope.payload is None:
            incoming.message = self._read_message(incoming)
        else:
            # A newer version's body waits for an upgraded instance before its payload is
            # read, as an inline one does.
            check_readable(incoming.model, envelope.body_version)
        return incoming

    def _received_model(self, type_name: str) -> type[Message] | None:
        """The model of a message received as ``type_name``: its handler's (None: no
        handler). Token mode adds the bus's own cancel command; the other modes refuse it
        (no sender of this app sends them one: it is forged)."""
        if type_name == CANCEL_TYPE:
            raise CancelRefused(
                f"endpoint {self.endpoint.name} is in mode {self.mode}: only a token-mode "
                "endpoint carries out a cancel"
            )
        found = self.endpoint.handler_for(type_name)
        return None if found is None else found[0]

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
        saga: SagaRole = None,
        handler: Handler | None = None,
        pending_timeouts: Sequence[PendingTimeout] = (),
    ) -> HandlerContext[Any]:
        """Run the handler of ``envelope``'s type (or ``handler``: a saga's not-found
        handler) on ``state``; ``saga`` says how it runs at a saga."""
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
            performer=self.config.performer_endpoint,
            saga=saga,
            routes=self.endpoint.routes,
            pending_timeouts=pending_timeouts,
        )
        if handler is None:
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

    async def _run_at_state(
        self,
        envelope: Envelope,
        message: Message,
        stored: StateRow | None,
        *,
        now: datetime,
        sql: Any,
        origin_row: str,
        abandoned: list[str],
    ) -> Ran:
        """Run what ``envelope``'s message does at the partition's state as read (``stored``)
        and create its outputs' tokens (each naming ``origin_row``): the handler of an
        ordinary endpoint; at a saga, the handler of its instance, its not-found handler, or
        nothing (``shared.bus.saga``). Returns what the round commits."""
        turn = self._turn(envelope, stored)
        state: BaseModel
        context: HandlerContext[Any] | None
        if turn is None:
            state = self._load_state(None if stored is None else stored.data)
            context = await self._run_handler(envelope, message, state, now=now, sql=sql)
        elif turn.runs:
            state = turn.state
            context = await self._run_handler(
                envelope,
                message,
                state,
                now=now,
                sql=sql,
                saga=turn.role,
                handler=turn.handler,
                pending_timeouts=() if turn.row is None else turn.row.timeouts,
            )
        else:
            state, context = turn.state, None
        if context is None:
            created = CreatedTokens([], [])
        else:
            created = await self._create_outputs(context, envelope, origin_row, abandoned)
        write, outcome = self._state_write(envelope, turn, state, context, stored)
        return Ran(context, created, write, outcome)

    def _turn(self, envelope: Envelope, stored: StateRow | None) -> SagaTurn | None:
        """What the message does at a saga's instance; None at an ordinary endpoint."""
        saga = self.endpoint.saga
        if saga is None:
            return None
        return saga_turn(
            saga,
            self.endpoint.state_type,
            self.endpoint.current_name(envelope.type),
            stored,
            f"saga {self.endpoint.name} instance {shown(envelope.partition_key)!r}",
        )

    def _state_write(
        self,
        envelope: Envelope,
        turn: SagaTurn | None,
        state: BaseModel,
        context: HandlerContext[Any] | None,
        stored: StateRow | None,
    ) -> tuple[StateWrite | None, Outcome]:
        """The state row this message commits, and its outcome: an ordinary endpoint's state;
        a saga instance's new row (or its completed marker); nothing for a message that found
        no instance."""
        expected = None if stored is None else stored.version
        if turn is None:
            data = state.model_dump_json()
            write = StateWrite(envelope.partition_key, type(state).__name__, data, expected)
            return write, Outcome.PROCESSED
        if turn.role == "not_found":
            return None, Outcome.SAGA_NOT_FOUND
        completed = context is not None and context.completed
        row = turn.row_after(
            state,
            completed_at=to_datetime(self.config.clock()) if completed else None,
            message_id=envelope.id,
            requested=() if context is None else context.requested_timeouts,
            cancelled=frozenset() if context is None else frozenset(context.cancelled),
        )
        write = StateWrite(envelope.partition_key, SAGA_ROW_TYPE, row.to_json(), expected)
        return write, Outcome.PROCESSED

    def _audit(
        self,
        envelope: Envelope,
        outgoing: Iterable[OutgoingSignal],
        processed_at: datetime,
        *,
        outcome: AuditOutcome | None = None,
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
            outcome=outcome,
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
