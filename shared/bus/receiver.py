"""The token-mode receive pipeline (design notes section 3, steps R1-R9).

For a signal (m, a) at endpoint E: R1 read token(a); R2 read state and O(m); R3 insert O(m)
with a fresh claim id if absent; R4 claim the token by ETag compare-and-swap; R5 run the
handler, create the outgoing tokens and commit state + O(m) + audit row in one transaction;
R6 signal the committed tokens; R9 the caller acknowledges the queue message.

R7 (delete token(a)) and R8 (retire O(m)) are the cleanup's (``shared.cleanup.tasks``,
``OutboxRecords``; docs/claim-by-delete.md, issue 33). Design notes section 3 asks that the
signals go before the incoming token is deleted; the receiver cannot delete it too early if
it never deletes it, and the cleanup deletes it only once every token O(m) committed is gone
or claimed: consumed or received, hence signalled. Until then a copy of the message finds
token(a) claimed by O(m)'s claim id and O(m) committed: it resumes and signals again, which
is harmless (it is what a copy between R6 and R7 always did). Leaving R7 to the cleanup takes
one blob request per message off the hot path; the cleanup deletes the tokens 64 to a batch,
instead of checking each one's existence as it did.

A copy whose token is not the one O(m) names (``incoming_token``: another token for the
same message id, which only a second sender of that id or a forged signal makes) is deleted
here after R6, as R7 always was: the cleanup deletes only O(m)'s own token, and a claimed
token nobody deletes would stay for ever.

What all modes share (signal parsing, decoding, the handler call, the audit row) lives in
``shared.bus.pipeline``; what happens to a failing message, in ``shared.bus.failures``.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, replace

from shared.bus.cancel import Canceller
from shared.bus.envelope import Envelope, Signal
from shared.bus.formats import metadata_fields
from shared.bus.handles import CANCEL_TYPE, CancelScheduled
from shared.bus.messages import Message
from shared.bus.outgoing import Hints, send_signals
from shared.bus.pipeline import Delivery, Incoming, IncomingToken, Outcome, Pipeline
from shared.bus.records import OutboxRecord, outbox_row
from shared.bus.round_commit import commit_round
from shared.bus.rounds import Conflict, conflict_rounds
from shared.bus.state.base import StateRow, StateTransaction
from shared.bus.telemetry import within
from shared.clock import to_datetime
from shared.errors import (
    AlreadyExists,
    MalformedSignal,
    MessageSchemaError,
    NewerVersion,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    TransactionFailed,
)
from shared.logsafe import shown

log = logging.getLogger(__name__)


@dataclass
class _Progress:
    """What token mode's rounds for one message carry from one round to the next."""

    token: IncomingToken
    """token(a) as last read or claimed."""
    incoming: Incoming
    """Its message; a shared payload is read only once the claim is made (``_body``)."""
    inserted: OutboxRecord | None = None
    """An O(m) this invocation created, if any."""
    abandoned: list[str] = field(default_factory=list)
    """Unknown-outcome creates from rounds that did not commit."""
    hints: Hints = field(default_factory=dict)
    """For the tokens this invocation committed, if it did."""


class Receiver(Pipeline):
    """Token mode: deduplicates by claiming the incoming token for O(m)."""

    mode = "token"

    async def _process(self, signal: Signal, delivery: Delivery) -> Outcome:
        hinted = await self._from_hints(signal, delivery)
        if hinted is not None:
            # R1 skipped: the copy is the token's content (its digest is in the token's name)
            # and addressed here; the claim below is conditional on the ETag the token was
            # created with, so it fails (and we read the token after all) unless the token
            # still exists unclaimed, exactly as created.
            token, incoming = hinted
        else:
            read = await self._read_token(signal, delivery)  # R1
            if read is None:
                return Outcome.DUPLICATE
            token = read
            try:
                incoming = await self._decode(signal, token, delivery)
            except NewerVersion:
                if token.claim and await self._resumed_unread(signal, token):
                    return Outcome.RESUMED
                raise  # given back for an instance that reads it
        progress = _Progress(token, incoming)
        return await conflict_rounds(
            self.config,
            lambda: self._round(signal, delivery, progress),
            f"message {signal.message_id} at {self.endpoint.name}: still conflicting after "
            f"{self.config.max_conflict_rounds} rounds; the host will redeliver it",
        )

    async def _round(self, signal: Signal, delivery: Delivery, progress: _Progress) -> Outcome:
        """R2-R6 once; raises Conflict to start again from R2."""
        m, p = signal.message_id, signal.partition_key
        token, hints = progress.token, progress.hints
        # R2: state and O(m) in one query.
        snapshot = await self.state_store.read(p, m)
        # R3
        if snapshot.outbox is None:
            record = OutboxRecord(
                p,
                m,
                claim=self.config.new_id(),
                incoming_token=signal.token,
                started_at=to_datetime(self.config.clock()),
                format=self.config.wire_format,
            )
            try:
                etag = await self.state_store.insert_outbox(record)
            except AlreadyExists as e:
                raise Conflict from e
            outbox = progress.inserted = replace(record, etag=etag)
        else:
            outbox = snapshot.outbox
        # R4
        if not token.claim:
            claimed = {"claim": outbox.claim, **metadata_fields(self.config.wire_format)}
            try:
                new_etag = await self.tokens.set_metadata(signal.token, claimed, etag=token.etag)
            except (PreconditionFailed, NotFound) as e:
                reread = await self._read_token(signal, delivery)  # back to R1
                if reread is None:
                    await self._drop_unused_outbox(progress.inserted)
                    return Outcome.DUPLICATE
                progress.token = reread
                progress.incoming = await self._decode(signal, reread, delivery)
                raise Conflict from e
            progress.token = replace(token, etag=new_etag, claim=outbox.claim)
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
            # Claimed by O(m) and not yet committed: the handler runs, so its body is read now.
            envelope, message = await self._body(progress.incoming)
            if isinstance(message, CancelScheduled):
                committed = await self._cancel(envelope, message, outbox, progress.abandoned)
                await self._signal(signal, committed, hints)
                return Outcome.CANCEL
            outbox, outcome = await self._run_and_commit(
                envelope,
                message,
                outbox,
                snapshot.state,
                progress.abandoned,
                hints,
            )
        await self._signal(signal, outbox, hints)
        return outcome

    async def _signal(self, signal: Signal, outbox: OutboxRecord, hints: Hints) -> None:
        """R6; R7 and R8 are the cleanup's, for O(m)'s own token. Any other token the
        message came with goes now, after the signals, as R7 always did."""
        await send_signals(self.account, outbox.outgoing, hints, config=self.config)
        if signal.token != outbox.incoming_token:
            with contextlib.suppress(NotFound):
                await self.tokens.delete(signal.token)

    def _received_model(self, type_name: str) -> type[Message] | None:
        """The app's types, and the bus's own cancel command, which token mode carries out
        itself (``_cancel``)."""
        if type_name == CANCEL_TYPE:
            return CancelScheduled
        return super()._received_model(type_name)

    async def _cancel(
        self,
        envelope: Envelope,
        command: CancelScheduled,
        outbox: OutboxRecord,
        abandoned: list[str],
    ) -> OutboxRecord:
        """R5 of a cancel k (``ctx.cancel``): cancel the message it names (its own R1-R5 on
        that message's token, ``shared.bus.cancel``), then commit O(k) with no outputs and no
        state write. Should k's commit be lost or interrupted, a copy of k cancels again,
        which answers as the first did."""
        await Canceller.of(self).cancel_sent(command, envelope.source)
        now = to_datetime(self.config.clock())
        committed = outbox.committing([], abandoned, now)
        try:
            async with self.state_store.begin() as transaction:
                version = await transaction.commit(None, committed, self._audit(envelope, (), now))
        except (TransactionFailed, OutcomeUnknown) as e:
            raise Conflict from e
        return replace(committed, etag=version)

    async def _resumed_unread(self, signal: Signal, token: IncomingToken) -> bool:
        """A claimed token this instance cannot read (a newer version wrote it, during a
        rolling deploy): whether its message was processed, by O(m) committed with the
        token's claim id; if so it is resumed (R6 again), as any copy of it would be, instead
        of being given back. Its token waits for the cleanup's R7, so such copies now find it
        there; given back, one would be parked once its give-back window ran out."""
        snapshot = await self.state_store.read(signal.partition_key, signal.message_id)
        outbox = snapshot.outbox
        if outbox is None or not outbox.committed or outbox.claim != token.claim:
            return False
        await self._signal(signal, outbox, {})
        return True

    async def _from_hints(
        self, signal: Signal, delivery: Delivery
    ) -> tuple[IncomingToken, Incoming] | None:
        """The token as the signal's hints describe it, or None to read it: no hints, a copy
        the token's name does not vouch for, or one that does not decode into this signal's
        message for this endpoint (the token decides then)."""
        if signal.etag is None or signal.envelope is None:
            return None
        copy = signal.bound_envelope_copy()
        if copy is None:
            # Checked before any write: a forged copy must not even reach R3.
            log.warning(
                "endpoint %s: the envelope copy in the signal for %s is not the token's "
                "(its digest differs from the token name's); reading the token",
                self.endpoint.name,
                signal.token,
            )
            return None
        token = IncomingToken(signal.token, signal.etag, "", copy.encode("utf-8"))
        try:
            incoming = await self._decode(signal, token, delivery)
        except NewerVersion:
            # Read the token (R1) before giving the message back: a copy of a message already
            # processed is a duplicate, acknowledged, not one to give back for an hour.
            return None
        except (MalformedSignal, MessageSchemaError) as e:
            log.warning(
                "endpoint %s: ignoring the envelope copy in the signal for %s (%s); "
                "reading the token",
                self.endpoint.name,
                signal.token,
                shown(e),
            )
            return None
        return token, incoming

    async def _drop_unused_outbox(self, inserted: OutboxRecord | None) -> None:
        """An O(m) we inserted whose token turned out to be gone claims nothing: remove it
        (ETag-guarded, so a record someone else has since used is left alone)."""
        if inserted is None:
            return
        with contextlib.suppress(PreconditionFailed, OutcomeUnknown):
            await self.state_store.delete_outbox(inserted)

    async def _run_and_commit(
        self,
        envelope: Envelope,
        message: Message,
        outbox: OutboxRecord,
        stored: StateRow | None,
        abandoned: list[str],
        hints: Hints,
    ) -> tuple[OutboxRecord, Outcome]:
        # The store's transaction spans the handler, so that a handler's own writes through
        # ``ctx.sql`` (PostgreSQL) commit or roll back with the bus's rows.
        async with self.state_store.begin() as transaction:
            return await self._run_in(
                transaction, envelope, message, outbox, stored, abandoned, hints
            )

    async def _run_in(
        self,
        transaction: StateTransaction,
        envelope: Envelope,
        message: Message,
        outbox: OutboxRecord,
        stored: StateRow | None,
        abandoned: list[str],
        hints: Hints,
    ) -> tuple[OutboxRecord, Outcome]:
        endpoint = self.endpoint
        ran = await self._run_at_state(
            envelope,
            message,
            stored,
            now=outbox.started_at,
            sql=transaction.sql,
            origin_row=outbox_row(envelope.id),
            abandoned=abandoned,
        )
        created, write, outcome = ran.created, ran.write, ran.outcome
        now = to_datetime(self.config.clock())

        async def commit() -> OutboxRecord:
            committed = outbox.committing(created.committed_candidates, abandoned, now)
            audit = self._audit(
                envelope,
                committed.outgoing,
                now,
                outcome=ran.audit_outcome,
            )
            span = self.config.telemetry.committing(
                endpoint.name, self.mode, len(committed.outgoing)
            )
            with within(span), self._within_limits():
                version = await transaction.commit(write, committed, audit)
            return replace(committed, etag=version)

        committed = await commit_round(self.tokens, created, abandoned, commit)
        hints.update(created.hints)
        return committed, outcome
