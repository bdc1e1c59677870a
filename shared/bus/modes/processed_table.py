"""Processed-messages mode (seed "idempotent handlers"): one row per processed message.

Partition p of the endpoint's table holds ``state`` (as in token mode), ``processed|{m}`` for
every message processed (when, and the committed outgoing signals) and ``audit|{m}``; with
``store="postgres"`` the same rows live in PostgreSQL (``shared.bus.state.rows``). The
processed row is inserted in the same transaction as the state change: a copy that arrives
later finds it with the same query that reads the state and only re-sends the committed
signals; a concurrent copy's insert fails the whole transaction, so its state change is
never applied.

Storage grows by one row per processed message until ``expire_processed`` removes rows older
than the dedup window (``BusConfig.processed_retention_seconds``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.bus.envelope import Signal
from shared.bus.modes.common import (
    CommitRow,
    ModePipeline,
    check_page_size,
    drop_abandoned_tokens,
    state_operation,
)
from shared.bus.pipeline import Incoming, Outcome
from shared.bus.records import STATE_ROW, AuditRecord
from shared.bus.state.base import state_entity, state_row
from shared.bus.state.damaged import ROW_ERRORS, OnDamaged, pass_over
from shared.bus.state.rows import EndpointRows
from shared.clock import to_datetime
from shared.errors import PreconditionFailed
from shared.stores.blob import BlobContainer
from shared.stores.table import Entity, Insert, TableOperation

PROCESSED_PREFIX = "processed|"


def processed_row(message_id: str) -> str:
    return f"{PROCESSED_PREFIX}{message_id}"


@dataclass(frozen=True, kw_only=True)
class ProcessedRecord(CommitRow):
    incoming_token: str

    def to_entity(self) -> Entity:
        return Entity(
            self.partition_key,
            processed_row(self.message_id),
            {"incoming": self.incoming_token, **self.commit_properties()},
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> ProcessedRecord:
        return cls(
            incoming_token=str(entity["incoming"]),
            **CommitRow.commit_fields(entity, PROCESSED_PREFIX),
        )


class ProcessedMessagesPipeline(ModePipeline):
    mode = "processed_messages"

    async def _round(self, signal: Signal, incoming: Incoming, abandoned: list[str]) -> Outcome:
        m, p = signal.message_id, signal.partition_key
        rows = await self._read_partition_rows(p, processed_row(m))
        done = rows.get(processed_row(m))
        if done is not None:
            await self._finish(ProcessedRecord.from_entity(done).outgoing, signal)
            return Outcome.RESUMED
        envelope, message = await self._body(incoming)
        existing = rows.get(STATE_ROW)
        now = to_datetime(self.config.clock())
        async with self.rows.begin() as transaction:
            ran = await self._run_at_state(
                envelope,
                message,
                None if existing is None else state_row(existing),
                now=now,
                sql=transaction.sql,
                origin_row=processed_row(m),
                abandoned=abandoned,
            )
            created = ran.created
            record = ProcessedRecord(
                partition_key=p,
                message_id=m,
                committed_at=to_datetime(self.config.clock()),
                incoming_token=signal.token,
                outgoing=tuple(created.committed_candidates),
                abandoned=tuple(sorted(set(abandoned))),
            )

            def build() -> tuple[list[TableOperation], AuditRecord]:
                operations: list[TableOperation] = []
                if ran.write is not None:  # None: a saga's message that found no instance
                    operations.append(state_operation(existing, state_entity(ran.write)))
                operations.append(Insert(record.to_entity()))
                audit = self._audit(
                    envelope, record.outgoing, record.committed_at, outcome=ran.audit_outcome
                )
                return operations, audit

            await self._commit(transaction, build, created, abandoned)
        await self._finish(record.outgoing, signal, created.hints)
        return ran.outcome


async def expire_processed(
    rows: EndpointRows,
    *,
    tokens: BlobContainer,
    older_than: datetime,
    page_size: int = 100,
    continuation: str | None = None,
    on_damaged: OnDamaged | None = None,
) -> tuple[int, str | None]:
    """Remove processed rows committed before ``older_than`` (now minus
    ``BusConfig.processed_retention_seconds``), one page of up to ``page_size`` rows per call,
    from the endpoint's table or its rows in PostgreSQL. Returns how many were removed and the
    continuation for the next call (None when done).

    Before a row goes, uncommitted tokens of its message's rounds still under
    ``{endpoint}/{m}/`` are deleted (committed ones are in flight and left to their receiver);
    a row whose uncommitted token is younger than ``older_than`` is kept for a later pass.
    Rows are deleted with their ETag; ``audit|`` rows are the audit's and stay. A row that
    cannot be read goes to ``on_damaged`` and stays (``shared.bus.state.damaged``).

    A late duplicate beyond the window: its incoming token is normally gone (deleted right
    after the first processing), so the copy is acknowledged without reading anything. Only
    a message whose first processing committed but never finished (for instance poisoned
    after the commit) and that is replayed after its row expired can be processed a second
    time, and only once its audit row (same commit, kept for the audit retention) is gone too.
    """
    check_page_size(page_size)
    entities, following = await rows.page(
        row_key_prefix=PROCESSED_PREFIX,
        page_size=page_size,
        continuation=continuation,
        on_damaged=on_damaged,
    )
    removed = 0
    for entity in entities:
        try:
            removed += await _expire_row(rows, entity, tokens, older_than)
        except ROW_ERRORS as e:
            pass_over(on_damaged, rows.damaged(entity, e))
    return removed, following


async def _expire_row(
    rows: EndpointRows, entity: Entity, tokens: BlobContainer, older_than: datetime
) -> bool:
    """Remove one processed row if it is past the window and its tokens allow it."""
    record = ProcessedRecord.from_entity(entity)
    if record.committed_at >= older_than:
        return False
    if not await drop_abandoned_tokens(
        tokens, rows.name, record.message_id, record.committed_attempts, older_than=older_than
    ):
        return False
    try:
        await rows.delete(entity.partition_key, entity.row_key, etag=entity.etag)
    except PreconditionFailed:
        return False
    return True
