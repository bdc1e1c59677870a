"""The outgoing side and round structure shared by the non-token modes.

Each mode runs rounds: read its dedup data and state, run the handler, create the output
tokens (fresh attempt ids, before the commit), commit state + dedup record + audit row in one
table transaction, then signal the committed tokens and delete the incoming token. A round
that loses a race discards its tokens and starts again; a copy that finds the message already
committed only re-sends the committed signals, so no token is ever created twice for one
message (a token-mode receiver downstream would process a second token again).
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.bus.deliveries import decode_signals, encode_signals
from shared.bus.envelope import TOKEN_NAME, Signal, token_prefix
from shared.bus.outgoing import CreatedTokens, Hints, send_signals
from shared.bus.pipeline import Delivery, Incoming, Outcome, Pipeline
from shared.bus.records import STATE_ROW, AuditRecord, OutgoingSignal, json_property
from shared.bus.round_commit import commit_round
from shared.bus.rounds import conflict_rounds
from shared.bus.state.rows import EndpointRows, RowsTransaction
from shared.bus.telemetry import within
from shared.errors import (
    CorruptRecord,
    InvalidValue,
    NotFound,
    PreconditionFailed,
)
from shared.stores.blob import BlobContainer
from shared.stores.table import Entity, Insert, TableOperation, TableValue, Update

log = logging.getLogger(__name__)


def signals_property(outgoing: Sequence[OutgoingSignal]) -> str:
    return json_property("outgoing", encode_signals(outgoing))


def parse_signals(value: object) -> tuple[OutgoingSignal, ...]:
    return decode_signals(str(value))


@dataclass(frozen=True, kw_only=True)
class CommitRow:
    """What every window mode's dedup row records about one processed message: when it was
    committed, the output signals it committed (the cleanup reads their attempt ids) and the
    attempt ids its rounds abandoned."""

    partition_key: str
    message_id: str
    committed_at: datetime
    outgoing: tuple[OutgoingSignal, ...]
    abandoned: tuple[str, ...]

    @property
    def committed_attempts(self) -> frozenset[str]:
        return frozenset(o.attempt_id for o in self.outgoing)

    def commit_properties(self) -> dict[str, TableValue]:
        return {
            "committed_at": self.committed_at,
            "outgoing": signals_property(self.outgoing),
            "abandoned": json_property("abandoned", json.dumps(list(self.abandoned))),
        }

    @staticmethod
    def commit_fields(entity: Entity, row_prefix: str) -> dict[str, Any]:
        committed_at = entity["committed_at"]
        if not isinstance(committed_at, datetime):
            raise CorruptRecord(
                f"row {entity.partition_key!r}/{entity.row_key!r}: committed_at {committed_at!r}"
            )
        return {
            "partition_key": entity.partition_key,
            "message_id": entity.row_key[len(row_prefix) :],
            "committed_at": committed_at,
            "outgoing": parse_signals(entity["outgoing"]),
            "abandoned": tuple(json.loads(str(entity["abandoned"]))),
        }


def state_operation(existing: Entity | None, row: Entity) -> TableOperation:
    """Insert the first state of a partition; afterwards replace it only if unchanged."""
    return Insert(row) if existing is None else Update(row, existing.etag)


class ModePipeline(Pipeline):
    """A pipeline whose dedup record is committed with the state, without a token claim."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: EndpointRows = self.state_store.rows()
        """The mode's rows, in the endpoint's store (its table, or PostgreSQL)."""

    async def _process(self, signal: Signal, delivery: Delivery) -> Outcome:
        token = await self._read_token(signal, delivery)
        if token is None:
            # The incoming token is deleted only after the commit and the signals: whatever
            # this copy is, an earlier one finished it.
            return Outcome.DUPLICATE
        incoming = await self._decode(signal, token, delivery)
        abandoned: list[str] = []  # unknown-outcome creates of rounds that did not commit
        return await conflict_rounds(
            self.config,
            lambda: self._round(signal, incoming, abandoned),
            f"message {signal.message_id} at {self.endpoint.name}: still conflicting after "
            f"{self.config.max_conflict_rounds} rounds; the host will redeliver it",
        )

    @abc.abstractmethod
    async def _round(self, signal: Signal, incoming: Incoming, abandoned: list[str]) -> Outcome:
        """One read-run-commit-signal round; raises Conflict to start again. A shared
        payload is read (``_body``) only after the round's duplicate check, when the handler
        is about to run."""

    async def _commit(
        self,
        transaction: RowsTransaction,
        build: Callable[[], tuple[list[TableOperation], AuditRecord]],
        created: CreatedTokens,
        abandoned: list[str],
    ) -> list[str | None]:
        """Commit the round's rows and audit row, or clean up after it and raise Conflict, as
        every mode does (``shared.bus.round_commit``)."""

        async def commit() -> list[str | None]:
            with self._within_limits():
                operations, audit = build()
                audit.to_entity()  # the audit row's limits, the same in every store
            outputs = len(created.committed_candidates)
            span = self.config.telemetry.committing(self.endpoint.name, self.mode, outputs)
            with within(span), self._within_limits():
                return await transaction.commit(operations, audit)

        return await commit_round(self.tokens, created, abandoned, commit)

    async def _read_partition_rows(self, partition_key: str, dedup_row: str) -> dict[str, Entity]:
        """The partition's state row and the mode's dedup row for this message, in one query
        (R2), keyed by RowKey; absent rows are simply missing."""
        return await self.rows.read(partition_key, [STATE_ROW, dedup_row])

    async def _finish(
        self, outgoing: Sequence[OutgoingSignal], signal: Signal, hints: Hints | None = None
    ) -> None:
        """Signal the committed outputs (again, for a copy: harmless, a consumed token is a
        404 downstream), then delete the incoming token, which carried the payload.
        ``hints`` (tokens this round created) spare a token-mode receiver its read."""
        await send_signals(self.account, tuple(outgoing), hints, config=self.config)
        await self._delete_incoming(signal)

    async def _delete_incoming(self, signal: Signal) -> None:
        with contextlib.suppress(NotFound):
            await self.tokens.delete(signal.token)


def check_page_size(page_size: int, minimum: int = 1) -> int:
    if page_size < minimum or page_size > 1000:
        raise InvalidValue(f"page_size must be between {minimum} and 1000, got {page_size}")
    return page_size


async def drop_abandoned_tokens(
    tokens: BlobContainer,
    sender: str,
    message_id: str,
    committed_attempts: Collection[str],
    *,
    older_than: datetime,
) -> bool:
    """Before a dedup record is removed, delete the tokens its message's rounds created but
    never committed (listed under the sender-scoped prefix ``{sender}/{m}/``). Committed tokens
    are left alone: they were signalled and their receiver deletes them. Returns False when an
    uncommitted token younger than ``older_than`` remains (its round may still be running);
    the record must then stay, because it is what tells the cleanup that token's fate."""
    clear = True
    async for blob in tokens.list(token_prefix(sender, message_id)):
        match = TOKEN_NAME.fullmatch(blob.name)
        if match is not None and match["attempt"] in committed_attempts:
            continue
        if blob.last_modified >= older_than:
            clear = False
            continue
        with contextlib.suppress(NotFound, PreconditionFailed):
            await tokens.delete(blob.name, etag=blob.etag)
            log.info("removed abandoned token %s", blob.name)
    return clear
