"""What a handler sees: the partition's typed state, its outputs, and deterministic helpers."""

from __future__ import annotations

import random as _random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from shared.bus.effects import (
    PERFORMER_ENDPOINT,
    EffectAnswered,
    EffectRequest,
    ServiceDeclaration,
    check_service_name,
    effect_key,
)
from shared.bus.envelope import Envelope
from shared.bus.handles import CancelScheduled, MessageHandle
from shared.bus.ids import derived_id, stable_seed
from shared.bus.messages import (
    Command,
    Event,
    Message,
    check_payload_size,
    checked_partition_key,
)
from shared.bus.routes import Routes
from shared.bus.saga import REPLY_PARTITION_HEADER, PendingTimeout
from shared.bus.schedule import due_time
from shared.bus.telemetry import trace_headers
from shared.errors import (
    CancelRefused,
    InvalidName,
    MessageTooLarge,
    NoReplyAddress,
    NotASaga,
    UndeclaredService,
)
from shared.logsafe import shown
from shared.resources import check_endpoint_name
from shared.stores.names import check_key

S = TypeVar("S", bound=BaseModel)
SagaRole = Literal["instance", "not_found"] | None
"""How a handler runs at a saga: for an instance, or for a message that found none; None at
an ordinary endpoint."""


@dataclass(frozen=True)
class PendingOutput:
    """A message the handler asked to send; ``to`` is None for a publish.

    ``trace`` is the W3C trace context of the span that asked (the handler's), which its
    envelopes carry; None: the context current when they are built. Kept apart from
    ``headers``, which are the handler's own: a replay compares those, and a span id differs
    on every run."""

    message: Message
    to: str | None
    headers: dict[str, str]
    trace: dict[str, str] | None = None
    deliver_at: datetime | None = None
    """Not to be processed before this time (``shared.bus.schedule``); None: at once."""
    partition_key: str | None = None
    """The partition it goes to when not its type's own (a reply to a saga instance:
    ``HandlerContext.reply``); None: ``Message.partition_key()``."""


class HandlerContext(Generic[S]):
    """Handed to every handler run.

    ``state`` is the partition's state, to be mutated in place; it is saved atomically with the
    outgoing messages. ``new_id()``, ``random()`` and ``now()`` are derived from the incoming
    message (SHA-256 seeded), so a re-run for the same message and state yields the same ids,
    numbers and time: required by state-based endpoints, harmless for the others. ``seed`` and
    ``now`` are what a state-based endpoint records with each version and passes back when it
    replays a duplicate.

    ``sql`` is the open database transaction of an endpoint whose state is in PostgreSQL (an
    asyncpg connection inside BEGIN): what the handler writes with it commits together with
    the state, the outbox record and the audit row, or not at all. None for Table Storage.
    """

    def __init__(
        self,
        *,
        endpoint: str,
        envelope: Envelope,
        state: S,
        now: datetime,
        max_payload_bytes: int,
        max_outputs: int,
        services: Mapping[str, ServiceDeclaration],
        performer: str = PERFORMER_ENDPOINT,
        seed: int | None = None,
        sql: Any = None,
        saga: SagaRole = None,
        routes: Routes | None = None,
        pending_timeouts: Sequence[PendingTimeout] = (),
    ) -> None:
        self.endpoint = endpoint
        self._routes = routes
        self._saga = saga
        self._pending = tuple(pending_timeouts)
        self.completed = False
        """Whether the handler ended its saga instance (``complete``)."""
        self.requested_timeouts: list[PendingTimeout] = []
        """The timeouts this run requested (``request_timeout``), kept by the instance."""
        self.cancelled: set[str] = set()
        """Ids of the messages this run cancelled."""
        self._services = services
        self._performer = performer
        self.sql = sql
        self.envelope = envelope
        self.state = state
        self._now = now
        self.seed = stable_seed(envelope.id, "random") if seed is None else seed
        self._random = _random.Random(self.seed)
        self._ids = 0
        self._effects = 0
        self._max_payload = max_payload_bytes
        self._max_outputs = max_outputs
        self.outputs: list[PendingOutput] = []

    @property
    def message_id(self) -> str:
        return self.envelope.id

    @property
    def partition_key(self) -> str:
        return self.envelope.partition_key

    def now(self) -> datetime:
        """The processing time, captured once per incoming message."""
        return self._now

    def random(self) -> float:
        """A number in [0, 1) from a generator seeded by the incoming message id."""
        return self._random.random()

    def randint(self, low: int, high: int) -> int:
        return self._random.randint(low, high)

    def new_id(self) -> str:
        """A fresh id that is the same on every run of this handler for this message."""
        self._ids += 1
        return derived_id(self.envelope.id, "new_id", self._ids)

    def send(
        self,
        command: Command,
        *,
        to: str,
        headers: dict[str, str] | None = None,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
    ) -> MessageHandle:
        """Send a command to endpoint ``to`` once this message's processing commits; with
        ``delay`` (from ``now()``) or ``deliver_at``, it is not processed before then. A
        delayed command to the handler's own endpoint is how a handler sets a timeout.
        Returns its handle, which ``cancel`` takes (keep it in the state to cancel later)."""
        if not isinstance(command, Command):
            raise TypeError(f"send() takes a Command; publish() events ({type(command)!r})")
        due = due_time(self._now, delay, deliver_at)
        to = check_endpoint_name(to)
        handle = self._handle_of_next(to, command.partition_key())
        self._add(PendingOutput(command, to, dict(headers or {}), trace_headers(), due))
        return handle

    def cancel(self, handle: MessageHandle) -> None:
        """Cancel the message ``handle`` names once this message's processing commits: it is
        then never processed, unless it was already (``docs/writing-endpoints.md``,
        "Cancelling a scheduled message"). Only the endpoint that sent it may, and only a
        message to one of the app's token-mode endpoints can be cancelled (CancelRefused,
        before anything is written: the incoming message is parked)."""
        if not isinstance(handle, MessageHandle):
            raise TypeError(f"cancel() takes a MessageHandle ({type(handle)!r})")
        if handle.sender != self.endpoint:
            raise CancelRefused(
                f"{self.endpoint} cannot cancel message {handle.message_id}: {handle.sender} "
                "sent it, and only the sender of a message may cancel it"
            )
        if self._routes is not None:
            self._routes.check_cancel(self.endpoint, handle.destination)
        cancel = CancelScheduled.of(handle)
        self._add(PendingOutput(cancel, handle.destination, {}, trace_headers()))
        self.cancelled.add(handle.message_id)

    def request_timeout(
        self,
        message: Command,
        *,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
    ) -> MessageHandle:
        """At a saga: send ``message`` to this instance, not processed before ``delay`` from
        ``now()`` (or ``deliver_at``), once this message's processing commits. The instance
        keeps its handle among its pending timeouts until it is handled or cancelled, and
        completing the instance cancels it. Returns the handle, for ``cancel``."""
        self._instance_only("request_timeout()")
        if not isinstance(message, Command):
            raise TypeError(f"request_timeout() takes a Command ({type(message)!r})")
        due = due_time(self._now, delay, deliver_at)
        handle = self._handle_of_next(self.endpoint, self.partition_key)
        output = PendingOutput(message, self.endpoint, {}, trace_headers(), due, self.partition_key)
        self._add(output)
        timeout = PendingTimeout(
            message_id=handle.message_id,
            type=message.type_name(),
            due=due,
            handle=handle.model_dump(),
        )
        self.requested_timeouts.append(timeout)
        return handle

    def reply(self, message: Message, *, headers: dict[str, str] | None = None) -> None:
        """Send ``message`` to the endpoint that sent the message being handled, once this
        message's processing commits, checked like any send. When that sender is a saga, the
        reply goes to the instance that sent it (``REPLY_PARTITION_HEADER``), whatever the
        reply's own correlation property says; otherwise to its type's partition."""
        source = self.envelope.source
        if self._routes is not None and self._routes.accepted_by(source) is None:
            raise NoReplyAddress(
                f"message {shown(self.envelope.id)} came from {shown(source)!r}, which is no "
                "endpoint to reply to (a client's message, or an endpoint of another app this "
                "app does not declare)"
            )
        try:
            to = check_endpoint_name(source)
        except InvalidName:
            raise NoReplyAddress(
                f"message {shown(self.envelope.id)} came from {shown(source)!r}, which is no "
                "endpoint to reply to"
            ) from None
        partition = self.envelope.headers.get(REPLY_PARTITION_HEADER)
        if partition is not None:
            partition = check_key("PartitionKey", partition)
        self._add(
            PendingOutput(
                message,
                to,
                dict(headers or {}),
                trace_headers(),
                None,
                partition,
            )
        )

    def complete(self) -> None:
        """End this saga instance: once this message's processing commits, together with its
        outputs, the instance's state is gone and every later message for it is
        ``saga_not_found`` (``docs/sagas.md``). Its pending timeouts are cancelled."""
        self._instance_only("complete()")
        if self.completed:
            return
        self.completed = True
        if self._routes is not None and not self._routes.cancels_at(self.endpoint):
            return  # a mode without cancellation: its timeouts fire and find no instance
        for pending in (*self._pending, *self.requested_timeouts):
            if pending.message_id not in self.cancelled and pending.message_id != self.message_id:
                self.cancel(MessageHandle.model_validate(pending.handle))

    def _handle_of_next(self, to: str, partition_key: str) -> MessageHandle:
        """The handle of the output about to be added, sent to ``to`` in ``partition_key``:
        its position among the outputs fixes its message id, as the planner derives it."""
        return MessageHandle(
            destination=to,
            partition_key=partition_key,
            message_id=derived_id(self.envelope.id, "out", len(self.outputs), to),
            sender=self.endpoint,
            incoming_id=self.envelope.id,
        )

    def _instance_only(self, what: str) -> None:
        if self._saga != "instance":
            raise NotASaga(
                f"{what} is for a saga instance: this handler runs "
                + (
                    "for a message that found no instance"
                    if self._saga == "not_found"
                    else f"at endpoint {self.endpoint}, which is not a saga"
                )
            )

    def publish(
        self,
        event: Event,
        *,
        headers: dict[str, str] | None = None,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
    ) -> None:
        """Publish an event to every subscriber of its topic once processing commits; with
        ``delay`` or ``deliver_at``, no subscriber processes it before then."""
        if not isinstance(event, Event):
            raise TypeError(f"publish() takes an Event; send() commands ({type(event)!r})")
        due = due_time(self._now, delay, deliver_at)
        self._add(PendingOutput(event, None, dict(headers or {}), trace_headers(), due))

    def request_effect(
        self,
        *,
        service: str,
        operation: str,
        body: dict[str, Any],
        answer: type[EffectAnswered],
        reply_to: str | None = None,
    ) -> str:
        """Ask the bus to call ``service``'s ``operation`` with ``body`` once this message's
        processing commits (``docs/effects.md``); its answer comes back as an ``answer`` to
        ``reply_to`` (this endpoint by default), in this message's partition. Returns the
        idempotency key, the same on every run for this message and position. A service or
        operation the app does not declare is refused here (UndeclaredService: the incoming
        message is parked), before anything is committed."""
        if not (isinstance(answer, type) and issubclass(answer, EffectAnswered)):
            raise TypeError(f"request_effect() answers with an EffectAnswered type ({answer!r})")
        declared = self._services.get(check_service_name("service", service))
        if declared is None:
            raise UndeclaredService(
                f"no service {service} is declared (declared: {sorted(self._services)})"
            )
        declared.path(check_service_name("operation", operation))
        self._effects += 1
        request = EffectRequest(
            key=effect_key(self.envelope.id, self._effects),
            service=service,
            operation=operation,
            body=body,
            answer_type=answer.type_name(),
            reply_to=check_endpoint_name(reply_to or self.endpoint),
            partition=self.partition_key,
        )
        self._add(PendingOutput(request, self._performer, {}, trace_headers()))
        return request.key

    def _add(self, output: PendingOutput) -> None:
        if self._saga is not None:
            # A saga's messages name the instance that sent them, for the replies.
            headers = {**output.headers, REPLY_PARTITION_HEADER: self.partition_key}
            output = replace(output, headers=headers)
        add_output(
            self.outputs, output, max_outputs=self._max_outputs, max_payload=self._max_payload
        )


def add_output(
    outputs: list[PendingOutput], output: PendingOutput, *, max_outputs: int, max_payload: int
) -> None:
    """Append ``output`` to ``outputs`` (a handler's, or a session's) once it is within the
    limits: at most ``max_outputs`` messages, each body within ``max_payload`` bytes, each
    with a valid partition key. Refused before anything is written."""
    if len(outputs) >= max_outputs:
        raise MessageTooLarge(
            f"a handler or session may send at most {max_outputs} messages at once"
        )
    check_payload_size(output.message, max_payload)
    checked_partition_key(output.message)
    outputs.append(output)
