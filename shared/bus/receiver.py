"""The token-mode receive pipeline (design notes section 3, steps R1-R9).

For a signal (m, a) at endpoint E: R1 read token(a); R2 read state and O(m); R3 insert O(m)
with a fresh claim id if absent; R4 claim the token by ETag compare-and-swap; R5 run the
handler, create the outgoing tokens and commit state + O(m) + audit row in one transaction;
R6 signal the committed tokens; R7 delete token(a); R8 leave O(m) to the cleanup sweep (it
is retired once token(a) is gone); R9 the caller acknowledges the queue message.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from shared.bus.app import Endpoint, call_handler
from shared.bus.config import BusConfig
from shared.bus.context import HandlerContext
from shared.bus.envelope import Envelope, Signal
from shared.bus.messages import Message
from shared.bus.outgoing import create_tokens, discard_tokens, plan_deliveries, send_signals
from shared.bus.records import (
    STATE_ROW,
    AuditRecord,
    OutboxRecord,
    outbox_row,
)
from shared.bus.topics import RecipientLists
from shared.clock import to_datetime
from shared.errors import (
    AlreadyExists,
    ConflictRetriesExhausted,
    InvalidName,
    MalformedSignal,
    MessageSchemaError,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    TooLarge,
    TransactionFailed,
    UnknownMessageType,
)
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob
from shared.stores.names import check_key
from shared.stores.table import Entity, Insert, TableOperation, Update

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    PROCESSED = "processed"
    """This invocation ran the handler and committed its effects."""
    RESUMED = "resumed"
    """The effects were already committed (by an earlier or concurrent copy); this
    invocation finished sending and deleting. No handler ran."""
    DUPLICATE = "duplicate"
    """The token was already gone: an earlier copy finished everything."""
    POISONED = "poisoned"
    ANOMALY = "anomaly"


class _Conflict(Exception):
    """Another writer got there first; go back to R2."""


@dataclass
class _Token:
    name: str
    etag: str
    claim: str
    envelope_bytes: bytes

    @classmethod
    def of(cls, blob: Blob) -> _Token:
        return cls(blob.properties.name, blob.etag, blob.metadata.get("claim", ""), blob.data)


def poison_body(endpoint: str, raw: str, reason: str, dequeue_count: int) -> str:
    """A poison message keeps the original signal verbatim next to why it was parked, so an
    operator can read the reason and replay the signal unchanged."""
    return json.dumps(
        {
            "poison": {"endpoint": endpoint, "reason": reason, "dequeue_count": dequeue_count},
            "signal": raw,
        }
    )


class Receiver:
    """Runs the pipeline for one endpoint. Stateless between messages; safe to share."""

    def __init__(
        self,
        endpoint: Endpoint[Any],
        account: StorageAccount,
        topics: RecipientLists,
        config: BusConfig,
    ) -> None:
        self.endpoint = endpoint
        self.account = account
        self.config = config
        self.topics = topics
        self.tokens = account.blob_container(config.tokens_container)
        self.table = account.table(endpoint.name)

    async def receive(self, raw: str, dequeue_count: int = 1) -> Outcome:
        """Process one queue message. Returns normally when the message may be acknowledged;
        raises when the host should redeliver it (handler errors, storage outages)."""
        try:
            signal = Signal.parse(raw)
            check_key("PartitionKey", signal.partition_key)
        except (MalformedSignal, InvalidName) as e:
            return await self._poison(raw, str(e), dequeue_count)
        try:
            return await self._process(signal)
        except (MalformedSignal, UnknownMessageType, MessageSchemaError) as e:
            return await self._poison(raw, str(e), dequeue_count)

    async def _poison(self, raw: str, reason: str, dequeue_count: int) -> Outcome:
        log.error("endpoint %s: parking message in poison queue: %s", self.endpoint.name, reason)
        queue = self.account.queue(poison_queue(self.endpoint.name))
        try:
            await queue.send(poison_body(self.endpoint.name, raw, reason, dequeue_count))
        except TooLarge:
            await queue.send(raw)  # no room for the reason beside it; the log has it
        return Outcome.POISONED

    async def _read_token(self, signal: Signal) -> _Token | None:
        try:
            return _Token.of(await self.tokens.read(signal.token))
        except NotFound:
            return None

    def _decode(self, signal: Signal, token: _Token) -> tuple[Envelope, Message]:
        try:
            envelope = Envelope.from_bytes(token.envelope_bytes)
        except ValidationError as e:
            raise MalformedSignal(f"token {signal.token} does not hold an envelope: {e}") from None
        if envelope.id != signal.message_id or envelope.partition_key != signal.partition_key:
            raise MalformedSignal(
                f"token {signal.token} holds message {envelope.id} for "
                f"partition {envelope.partition_key!r}, not what the signal says"
            )
        if envelope.destination != self.endpoint.name:
            raise MalformedSignal(
                f"message {envelope.id} is addressed to "
                f"{envelope.destination}, not {self.endpoint.name}"
            )
        found = self.endpoint.handler_for(envelope.type)
        if found is None:
            raise UnknownMessageType(
                f"endpoint {self.endpoint.name} has no handler for message type "
                f"{envelope.type!r} (message {envelope.id}); it handles "
                f"{sorted(self.endpoint.handlers)}"
            )
        model, _ = found
        try:
            message = model.model_validate(envelope.body)
        except ValidationError as e:
            raise MessageSchemaError(
                f"message {envelope.id} of type {envelope.type} does not match its schema: {e}"
            ) from None
        return envelope, message

    async def _process(self, signal: Signal) -> Outcome:
        m, p = signal.message_id, signal.partition_key
        token = await self._read_token(signal)  # R1
        if token is None:
            return Outcome.DUPLICATE
        envelope, message = self._decode(signal, token)
        inserted: OutboxRecord | None = None  # an O(m) this invocation created, if any
        abandoned: list[str] = []  # unknown-outcome creates from rounds that did not commit

        for round_number in range(self.config.max_conflict_rounds):
            if round_number:
                await self.config.sleep(self.config.backoff(round_number))
            # R2: state and O(m) in one query.
            rows = {
                e.row_key: e
                for e in (
                    await self.table.query(partition_key=p, row_keys=[STATE_ROW, outbox_row(m)])
                ).entities
            }
            outbox_entity = rows.get(outbox_row(m))
            # R3
            if outbox_entity is None:
                record = OutboxRecord(
                    p,
                    m,
                    claim=self.config.new_id(),
                    incoming_token=signal.token,
                    started_at=to_datetime(self.config.clock()),
                )
                try:
                    etag = await self.table.insert(record.to_entity())
                except AlreadyExists:
                    continue
                outbox = inserted = replace(record, etag=etag)
            else:
                outbox = OutboxRecord.from_entity(outbox_entity)
            # R4
            if not token.claim:
                try:
                    new_etag = await self.tokens.set_metadata(
                        signal.token, {"claim": outbox.claim}, etag=token.etag
                    )
                except (PreconditionFailed, NotFound):
                    token = await self._read_token(signal)  # back to R1
                    if token is None:
                        await self._drop_unused_outbox(inserted)
                        return Outcome.DUPLICATE
                    continue
                token = replace(token, etag=new_etag, claim=outbox.claim)
            elif token.claim != outbox.claim:
                log.error(
                    "endpoint %s: token %s is claimed by %s but O(%s) has claim %s; "
                    "acknowledging without processing",
                    self.endpoint.name,
                    signal.token,
                    token.claim,
                    m,
                    outbox.claim,
                )
                return Outcome.ANOMALY
            # R5
            outcome = Outcome.RESUMED
            if not outbox.committed:
                try:
                    outbox = await self._run_and_commit(
                        envelope, message, outbox, rows.get(STATE_ROW), abandoned
                    )
                except _Conflict:
                    continue
                outcome = Outcome.PROCESSED
            # R6
            await send_signals(self.account, outbox.outgoing)
            # R7
            with contextlib.suppress(NotFound):
                await self.tokens.delete(signal.token)
            # R8 is the cleanup's: O(m) is retired once token(a) is gone, off the hot path.
            return outcome
        raise ConflictRetriesExhausted(
            f"message {m} at {self.endpoint.name}: still conflicting after "
            f"{self.config.max_conflict_rounds} rounds; the host will redeliver it"
        )

    async def _drop_unused_outbox(self, inserted: OutboxRecord | None) -> None:
        """An O(m) we inserted whose token turned out to be gone claims nothing: remove it
        (ETag-guarded, so a record someone else has since used is left alone)."""
        if inserted is None:
            return
        with contextlib.suppress(PreconditionFailed, OutcomeUnknown):
            await self.table.delete(
                inserted.partition_key, outbox_row(inserted.message_id), etag=inserted.etag
            )

    async def _run_and_commit(
        self,
        envelope: Envelope,
        message: Message,
        outbox: OutboxRecord,
        state_entity: Entity | None,
        abandoned: list[str],
    ) -> OutboxRecord:
        endpoint = self.endpoint
        state = self._load_state(state_entity)
        context: HandlerContext[Any] = HandlerContext(
            endpoint=endpoint.name,
            envelope=envelope,
            state=state,
            now=outbox.started_at,
            max_payload_bytes=self.config.max_payload_bytes,
            max_outputs=self.config.max_outputs,
        )
        _, handler = endpoint.handlers[envelope.type]
        await call_handler(handler, context, message)

        deliveries = await plan_deliveries(
            context.outputs,
            sender=endpoint.name,
            incoming_id=envelope.id,
            correlation_id=envelope.correlation_id,
            topics=self.topics,
            config=self.config,
        )
        created = await create_tokens(
            self.tokens,
            deliveries,
            sender=endpoint.name,
            incoming_id=envelope.id,
            config=self.config,
        )
        abandoned.extend(created.abandoned)
        now = to_datetime(self.config.clock())
        committed = outbox.committing(created.committed_candidates, abandoned, now)
        audit = AuditRecord(
            partition_key=envelope.partition_key,
            endpoint=endpoint.name,
            message_id=envelope.id,
            message_type=envelope.type,
            source=envelope.source,
            correlation_id=envelope.correlation_id,
            causation_id=envelope.causation_id,
            sent_at=envelope.created_at,
            processed_at=now,
            mode="token",
            caused=[
                {"id": o.message_id, "type": o.type, "destination": o.destination}
                for o in committed.outgoing
            ],
        )
        state_row = Entity(
            envelope.partition_key,
            STATE_ROW,
            {"type": type(state).__name__, "data": state.model_dump_json()},
        )
        state_op: TableOperation = (
            Insert(state_row) if state_entity is None else Update(state_row, state_entity.etag)
        )
        try:
            etags = await self.table.transact(
                [
                    state_op,
                    Update(committed.to_entity(), etag=outbox.etag),
                    Insert(audit.to_entity()),
                ]
            )
        except TransactionFailed as e:
            # Someone else committed O(m) or changed the partition's state first. Our tokens
            # were created successfully and will never be committed: discard them now.
            await discard_tokens(self.tokens, created.committed_candidates)
            raise _Conflict from e
        except OutcomeUnknown as e:
            # The commit may still land: its tokens must stay. If it did land, the next round
            # finds O(m) committed with exactly these tokens; if not, the cleanup removes them.
            abandoned.extend(o.token for o in created.committed_candidates)
            raise _Conflict from e
        return replace(committed, etag=etags[1] or "")

    def _load_state(self, entity: Entity | None) -> BaseModel:
        state_type: type[BaseModel] = self.endpoint.state_type
        if entity is None:
            return state_type()
        return state_type.model_validate_json(str(entity["data"]))
