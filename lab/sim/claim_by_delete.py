"""Token mode with the claim made by the token's conditional delete (issue 33): a protocol the
simulator explores beside production's, never production code.

Production claims the incoming token by writing its metadata (R4, ``If-Match``) and deletes
it after the signals (R7): two writes on one blob. Here the claim *is* the delete: R2 reads
state and O(m), R3 inserts O(m) if absent, R4 deletes token(a) ``If-Match`` the ETag it was
read (or created, on the hinted path) with, R5 runs and commits, R6 signals; there is no R7.
O(m) keeps what the receiver needs of the token (its envelope, bound to the token's name by
its digest), since after the claim the token is gone: a redelivery after a crash between the
claim and the commit resumes from O(m).

What a claim that finds the token gone means is the question the simulator answers. The
options (``ClaimByDelete``) are the candidate answers, each run against every invariant:

- ``on_gone="resume"``: resume from O(m) whenever the token is gone;
- ``on_gone="resume-unless-inserted"``: resume only from an O(m) this invocation did not
  insert (one it inserted and then found the token gone for is dropped: a duplicate);
- ``on_gone="duplicate"``: a token gone is a duplicate, whoever inserted O(m);
- ``read_first``: no hinted path: a copy reads token(a) (R1) and inserts O(m) only after it
  found the token there in this invocation; gone then always means "resume";
- ``uncommitted``: the cleanup's rule for an uncommitted O(m) whose token is gone: retire
  it after the grace period (production's rule) or keep it for its redelivery.

The envelope O(m) keeps is modelled by ``KeptEnvelopes``, keyed by O(m)'s claim id and
written before O(m)'s insert is sent: only a stored O(m) names its claim id, so an envelope
is found exactly when the O(m) that would hold it was stored.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from shared.bus import BusApp
from shared.bus.app import Endpoint
from shared.bus.bus import Bus
from shared.bus.config import BusConfig
from shared.bus.envelope import Signal
from shared.bus.outgoing import Hints, send_signals
from shared.bus.pipeline import Delivery, Incoming, IncomingToken, Outcome, Pipeline
from shared.bus.receiver import Receiver
from shared.bus.records import OutboxRecord
from shared.bus.rounds import Conflict, conflict_rounds
from shared.bus.state.base import EndpointState
from shared.bus.state.stores import SqlDatabase
from shared.bus.topics import RecipientLists
from shared.cleanup.base import CleanupContext
from shared.cleanup.outbox_records import OutboxRecords
from shared.cleanup.report import TaskReport
from shared.clock import to_datetime
from shared.errors import AlreadyExists, NotFound, OutcomeUnknown, PreconditionFailed
from shared.stores.account import StorageAccount

log = logging.getLogger(__name__)

OnGone = Literal["resume", "resume-unless-inserted", "duplicate"]
Uncommitted = Literal["retire", "keep"]


@dataclass(frozen=True)
class ClaimByDelete:
    """One candidate protocol (see the module's docs)."""

    on_gone: OnGone = "resume-unless-inserted"
    read_first: bool = False
    uncommitted: Uncommitted = "keep"


KeptEnvelopes = dict[str, bytes]
"""The envelope each O(m) keeps, by its claim id."""


@dataclass
class _Claiming:
    token: IncomingToken
    incoming: Incoming
    seen: bool
    """token(a) was read, present, by this invocation (``read_first`` inserts only then)."""
    gone: bool = False
    """token(a) was found gone by this invocation."""
    claimed: bool = False
    inserted: OutboxRecord | None = None
    abandoned: list[str] = field(default_factory=list)
    hints: Hints = field(default_factory=dict)


class ClaimByDeleteReceiver(Receiver):
    """Token mode whose claim is the token's conditional delete."""

    def __init__(
        self,
        endpoint: Endpoint[Any],
        account: StorageAccount,
        topics: RecipientLists,
        config: BusConfig,
        *,
        state: EndpointState,
        protocol: ClaimByDelete,
        kept: KeptEnvelopes,
    ) -> None:
        super().__init__(endpoint, account, topics, config, state=state)
        self.protocol = protocol
        self.kept = kept

    async def _process(self, signal: Signal, delivery: Delivery) -> Outcome:
        hinted = None if self.protocol.read_first else await self._from_hints(signal, delivery)
        seen = gone = False
        if hinted is not None:
            token, incoming = hinted
        else:
            read = await self._read_token(signal, delivery)  # R1
            if read is None:
                kept = await self._kept_token(signal)
                if kept is None:
                    return Outcome.DUPLICATE
                token, gone = kept, True
            else:
                token, seen = read, True
            incoming = await self._decode(signal, token, delivery)
        progress = _Claiming(token, incoming, seen=seen, gone=gone)
        return await conflict_rounds(
            self.config,
            lambda: self._claiming_round(signal, delivery, progress),
            f"message {signal.message_id}: still conflicting",
        )

    async def _kept_token(self, signal: Signal) -> IncomingToken | None:
        """token(a) as the O(m) of its message keeps it, when the token itself is gone."""
        snapshot = await self.state_store.read(signal.partition_key, signal.message_id)
        if snapshot.outbox is None:
            return None
        data = self.kept.get(snapshot.outbox.claim)
        if data is None:
            return None
        return IncomingToken(signal.token, "", "", data)

    async def _claiming_round(
        self, signal: Signal, delivery: Delivery, progress: _Claiming
    ) -> Outcome:
        snapshot = await self.state_store.read(signal.partition_key, signal.message_id)  # R2
        outbox = snapshot.outbox
        if outbox is None:
            if progress.claimed:
                return Outcome.DUPLICATE  # the O(m) we claimed for was committed and retired
            if self.protocol.read_first and not progress.seen:
                return Outcome.DUPLICATE  # token gone and no O(m): processed and retired
            outbox = await self._insert(signal, progress)  # R3
        outcome = Outcome.RESUMED
        if not outbox.committed:
            claimed = progress.claimed or await self._claim(signal, delivery, progress)
            if not claimed and self._gone_is_duplicate(outbox, progress):
                drop = outbox if self.protocol.on_gone == "duplicate" else progress.inserted
                await self._drop_unused_outbox(drop)
                return Outcome.DUPLICATE
            progress.claimed = True
            envelope, message = await self._body(progress.incoming)
            outbox, outcome = await self._run_and_commit(
                envelope,
                message,
                outbox,
                snapshot.state,
                progress.abandoned,
                progress.hints,
            )
        await send_signals(self.account, outbox.outgoing, progress.hints, config=self.config)  # R6
        return outcome

    async def _insert(self, signal: Signal, progress: _Claiming) -> OutboxRecord:
        record = OutboxRecord(
            signal.partition_key,
            signal.message_id,
            claim=self.config.new_id(),
            incoming_token=signal.token,
            started_at=to_datetime(self.config.clock()),
            format=self.config.wire_format,
        )
        self.kept[record.claim] = progress.token.envelope_bytes
        try:
            etag = await self.state_store.insert_outbox(record)
        except AlreadyExists as e:
            raise Conflict from e
        progress.inserted = replace(record, etag=etag)
        return progress.inserted

    async def _claim(self, signal: Signal, delivery: Delivery, progress: _Claiming) -> bool:
        """R4: delete token(a) ``If-Match`` its ETag. True if this request claimed it, False
        if the token is gone; a token changed since it was read is read again (Conflict)."""
        if progress.gone:
            return False
        try:
            await self.tokens.delete(signal.token, etag=progress.token.etag)
        except (PreconditionFailed, NotFound) as e:
            reread = await self._read_token(signal, delivery)
            if reread is None:
                progress.gone = True
                return False
            progress.token, progress.seen = reread, True
            progress.incoming = await self._decode(signal, reread, delivery)
            raise Conflict from e
        return True

    def _gone_is_duplicate(self, outbox: OutboxRecord, progress: _Claiming) -> bool:
        rule = self.protocol.on_gone
        if self.protocol.read_first or rule == "resume":
            return False
        if rule == "duplicate":
            return True
        return progress.inserted is not None and progress.inserted.claim == outbox.claim

    async def _drop_unused_outbox(self, inserted: OutboxRecord | None) -> None:
        if inserted is None:
            return
        with contextlib.suppress(PreconditionFailed, OutcomeUnknown, NotFound):
            await self.state_store.delete_outbox(inserted)


class ClaimByDeleteBus(Bus):
    """A bus whose token-mode endpoints receive with ``ClaimByDeleteReceiver``."""

    def __init__(
        self,
        app: BusApp,
        account: StorageAccount,
        config: BusConfig,
        *,
        sql: SqlDatabase | None,
        protocol: ClaimByDelete,
        kept: KeptEnvelopes,
    ) -> None:
        super().__init__(app, account, config, sql=sql)
        self.protocol = protocol
        self.kept = kept
        self._claimers: dict[str, Pipeline] = {}

    def receiver(self, endpoint: str) -> Pipeline:
        declared = self.app.get(endpoint)
        if declared.mode != "token":
            return super().receiver(endpoint)
        found = self._claimers.get(endpoint)
        if found is None:
            found = self._claimers[endpoint] = ClaimByDeleteReceiver(
                declared,
                self.account,
                self.topics,
                self.config,
                state=self.endpoint_state(endpoint),
                protocol=self.protocol,
                kept=self.kept,
            )
        return found


class ClaimedOutboxRecords(OutboxRecords):
    """The cleanup's O(m) task with ``uncommitted="keep"``: an uncommitted O(m) stays, whether
    its token is there or not (gone, it may be a claim whose redelivery is still to come)."""

    async def _judge(
        self, context: CleanupContext, record: OutboxRecord, report: TaskReport
    ) -> str | None:
        if not record.committed:
            report.kept["claimed"] += 1
            return None
        return await super()._judge(context, record, report)
