"""Cancelling a scheduled message (issue 46): processing it with a handler that does nothing.

To cancel message t, the canceller runs token mode's own steps for t at t's endpoint E,
ignoring t's due time (design notes section 3):

- C1 (R1) read token(t); gone: t was finished already (its audit row says how) or never was;
- C2 (R2) read O(t);
- C3 (R3) insert O(t) with a fresh claim id, if absent;
- C4 (R4) claim the token by ETag compare-and-swap (changed or gone: back to C1);
- C5 (R5) commit O(t) with no outputs and ``outcome: cancelled``, and t's audit row saying
  so, with no state write (lost to another commit: back to C1).

So every race is the one token mode already settles: whoever commits O(t) first wins. A
delivery of t that comes later finds O(t) committed and only resumes (it has nothing to
signal); a canceller that finds O(t) committed without ``cancelled`` answers "processed"; a
delivery and a canceller that both hold O(t) claimed race as two copies of t would. An
instance that does not know ``outcome`` reads O(t) as a message processed with no outputs.
The cleanup deletes token(t) and retires O(t) (R7, R8) as for any committed record.

Nothing of t is run or read but its token's envelope: no handler, no shared payload.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import ValidationError

from shared.bus.config import BusConfig
from shared.bus.envelope import TOKEN_NAME, Envelope, token_prefix
from shared.bus.formats import metadata_fields
from shared.bus.handles import CancelScheduled
from shared.bus.pipeline import IncomingToken, Pipeline
from shared.bus.records import AuditRecord, OutboxRecord, audit_row
from shared.bus.rounds import Conflict, conflict_rounds
from shared.bus.state.base import EndpointState
from shared.clock import to_datetime
from shared.errors import (
    AlreadyExists,
    CancelRefused,
    MalformedSignal,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    TransactionFailed,
)
from shared.logsafe import shown
from shared.stores.blob import BlobContainer

log = logging.getLogger(__name__)


class CancelResult(enum.Enum):
    CANCELLED = "cancelled"
    """t is cancelled: it will never be processed (now, or by an earlier cancel)."""
    PROCESSED = "processed"
    """t was processed before the cancel came: nothing was undone."""
    NOT_FOUND = "not_found"
    """No such message at its endpoint: never sent, or finished so long ago that its audit
    row has expired."""


@dataclass(frozen=True)
class Target:
    """The message to cancel, as the canceller names it; its token must say the same."""

    partition_key: str
    message_id: str
    source: str | None
    """The endpoint that must have sent it (a cancel from a handler); None for a client's
    cancel, whose idempotency key named the token in its own scope's record."""


@dataclass
class _Progress:
    inserted: OutboxRecord | None = None
    """An O(t) this canceller created, dropped again if token(t) turns out to be gone."""


class Canceller:
    """Runs the cancel procedure at one token-mode endpoint, on its receiver's pieces."""

    def __init__(
        self, endpoint: str, tokens: BlobContainer, state: EndpointState, config: BusConfig
    ) -> None:
        self.endpoint = endpoint
        self.tokens = tokens
        self.state = state
        self.config = config

    @classmethod
    def of(cls, pipeline: Pipeline) -> Canceller:
        """The canceller of ``pipeline``'s endpoint; CancelRefused unless it is in token
        mode, the only mode whose token claim a cancel can take."""
        if pipeline.mode != "token":
            raise CancelRefused(
                f"endpoint {pipeline.endpoint.name} is in mode {pipeline.mode}: only messages "
                "to token-mode endpoints can be cancelled"
            )
        return cls(pipeline.endpoint.name, pipeline.tokens, pipeline.state_store, pipeline.config)

    async def cancel(self, token: str, target: Target) -> CancelResult:
        """Cancel the message token ``token`` carries (C1-C5); logs one line with the result.
        CancelRefused when the token is not ``target``'s at this endpoint."""
        match = TOKEN_NAME.fullmatch(token)
        if match is None or match["out"] != target.message_id:
            raise CancelRefused(
                f"token {shown(token, 200)!r} does not carry message {target.message_id}"
            )
        progress = _Progress()
        result = await conflict_rounds(
            self.config,
            lambda: self._round(token, target, progress),
            f"cancel of {target.message_id} at {self.endpoint}: still conflicting after "
            f"{self.config.max_conflict_rounds} rounds",
        )
        return self._logged(target, result)

    def _logged(self, target: Target, result: CancelResult) -> CancelResult:
        log.info(
            "cancel endpoint=%s message_id=%s partition=%s outcome=%s",
            self.endpoint,
            target.message_id,
            shown(target.partition_key, 100),
            result.value,
        )
        return result

    async def cancel_sent(self, command: CancelScheduled, source: str) -> CancelResult:
        """Carry out ``ctx.cancel``'s command, sent by ``source``: every token of the message
        it names (the sender's tokens for it, under ``{sender}/{incoming id}/``), which only
        its sender may cancel."""
        if command.sender != source:
            raise CancelRefused(
                f"a cancel sent by {source} names message {command.message_id} of "
                f"{command.sender}: only the sender of a message may cancel it"
            )
        target = Target(command.partition, command.message_id, source)
        prefix = token_prefix(command.sender, command.incoming_id)
        names = [
            blob.name
            async for blob in self.tokens.list(prefix)
            if (m := TOKEN_NAME.fullmatch(blob.name)) is not None and m["out"] == command.message_id
        ]
        if not names:
            return self._logged(target, await self._finished(target))
        results = [await self.cancel(name, target) for name in names]
        # Every token of t is decided by the one O(t); one already gone answers by the audit.
        return next((r for r in results if r is not CancelResult.NOT_FOUND), results[0])

    async def _round(self, name: str, target: Target, progress: _Progress) -> CancelResult:
        token = await self._read(name)  # C1
        if token is None:
            await self._drop_unused(progress)
            return await self._finished(target)
        envelope = self._checked(token, target)
        snapshot = await self.state.read(target.partition_key, target.message_id)  # C2
        outbox = snapshot.outbox or await self._insert(name, target, progress)  # C3
        if not token.claim:
            await self._claim(token, outbox)  # C4
        elif token.claim != outbox.claim:
            raise CancelRefused(
                f"token {name} is claimed by {token.claim} but O({target.message_id}) at "
                f"{self.endpoint} has claim {outbox.claim}: left as it is"
            )
        if outbox.committed:
            result = _answer(outbox)
        else:
            await self._commit(envelope, outbox)  # C5
            result = CancelResult.CANCELLED
        if name != outbox.incoming_token or result is CancelResult.CANCELLED:
            # Another token of t (the receiver deletes such a copy after R6, as here): the
            # cleanup's R7 deletes only O(t)'s own, and a claimed one nobody deletes would stay.
            # And t's own, once cancelled: R7 waits for nothing on a record with no outputs.
            # The cleanup would delete it in its pass, but the sender's record is judged in the
            # same pass, before or after, and a claimed token under the sender's prefix keeps
            # that record one pass longer (an abandoned token of t the cancel claimed: the
            # simulator's small-cancel with one fault).
            with contextlib.suppress(NotFound):
                await self.tokens.delete(name)
        return result

    async def _read(self, name: str) -> IncomingToken | None:
        try:
            return IncomingToken.of(await self.tokens.read(name))
        except NotFound:
            return None

    def _checked(self, token: IncomingToken, target: Target) -> Envelope:
        """The token's envelope, once it is ``target`` at this endpoint. Its payload is never
        read: the envelope is all the audit row needs."""
        try:
            envelope = Envelope.from_bytes(token.envelope_bytes)
        except (ValidationError, MalformedSignal) as e:
            raise CancelRefused(f"token {token.name} holds no envelope this bus reads") from e
        if (envelope.id, envelope.partition_key) != (target.message_id, target.partition_key):
            raise CancelRefused(
                f"token {token.name} holds message {envelope.id} of partition "
                f"{shown(envelope.partition_key, 100)!r}, not the one the cancel names"
            )
        if envelope.destination != self.endpoint:
            raise CancelRefused(
                f"message {envelope.id} is addressed to {envelope.destination}, not "
                f"{self.endpoint}: a cancel runs at the message's own endpoint"
            )
        if target.source is not None and envelope.source != target.source:
            raise CancelRefused(
                f"message {envelope.id} was sent by {envelope.source}, not {target.source}: "
                "only the sender of a message may cancel it"
            )
        return envelope

    async def _insert(self, name: str, target: Target, progress: _Progress) -> OutboxRecord:
        record = OutboxRecord(
            target.partition_key,
            target.message_id,
            claim=self.config.new_id(),
            incoming_token=name,
            started_at=to_datetime(self.config.clock()),
            format=self.config.wire_format,
        )
        try:
            etag = await self.state.insert_outbox(record)
        except AlreadyExists as e:
            raise Conflict from e
        progress.inserted = replace(record, etag=etag)
        return progress.inserted

    async def _claim(self, token: IncomingToken, outbox: OutboxRecord) -> None:
        claimed = {"claim": outbox.claim, **metadata_fields(self.config.wire_format)}
        try:
            await self.tokens.set_metadata(token.name, claimed, etag=token.etag)
        except (PreconditionFailed, NotFound) as e:
            raise Conflict from e  # back to C1: someone else claimed it, or it is gone

    async def _commit(self, envelope: Envelope, outbox: OutboxRecord) -> None:
        now = to_datetime(self.config.clock())
        committed = outbox.committing([], [], now, outcome="cancelled")
        try:
            async with self.state.begin() as transaction:
                await transaction.commit(None, committed, self._audit(envelope, now))
        except (TransactionFailed, OutcomeUnknown) as e:
            raise Conflict from e  # the next round reads O(t) and sees who committed

    def _audit(self, envelope: Envelope, at: datetime) -> AuditRecord:
        return AuditRecord(
            partition_key=envelope.partition_key,
            endpoint=self.endpoint,
            message_id=envelope.id,
            message_type=envelope.type,
            source=envelope.source,
            correlation_id=envelope.correlation_id,
            causation_id=envelope.causation_id,
            sent_at=envelope.created_at,
            processed_at=at,
            mode="token",
            outcome="cancelled",
        )

    async def _finished(self, target: Target) -> CancelResult:
        """t's token is gone: its audit row says whether it was cancelled or processed."""
        try:
            row = await self.state.rows().get(target.partition_key, audit_row(target.message_id))
        except NotFound:
            return CancelResult.NOT_FOUND
        if row.get("outcome") == "cancelled":
            return CancelResult.CANCELLED
        return CancelResult.PROCESSED

    async def _drop_unused(self, progress: _Progress) -> None:
        """An O(t) inserted here for a token found gone claims nothing: remove it
        (ETag-guarded, so a record someone has used since is left alone)."""
        if progress.inserted is not None:
            with contextlib.suppress(PreconditionFailed, OutcomeUnknown):
                await self.state.delete_outbox(progress.inserted)
            progress.inserted = None


def _answer(outbox: OutboxRecord) -> CancelResult:
    """What a committed O(t) says became of t."""
    return CancelResult.CANCELLED if outbox.outcome == "cancelled" else CancelResult.PROCESSED
