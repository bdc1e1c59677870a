"""State-based mode (seed "state-based consistent messaging"): a versioned state stream.

Partition p of the endpoint's table holds:
- ``state``: the latest state and its version number n (the stream's head, ETag-guarded);
- ``version|{n}``: one immutable row per version: the message that produced it, the context
  captured for the handler (time and random seed), the state after it, and a fingerprint of
  the handler's outputs;
- ``msgidx|{m}``: the message-id index, written in the same transaction as the version: the
  version m produced and the committed outgoing signals. A copy of m is found with the same
  query that reads the head, never by scanning the stream;
- ``audit|{m}``.

With ``store="postgres"`` the same rows live in PostgreSQL (``shared.bus.state.rows``).

A copy of an already processed message restores the version before m's (a point read of
``version|{n-1}`` and ``version|{n}`` in one query), re-runs the handler with the captured
context, and compares: the same outputs (types, destinations, bodies, hence the same ids) and
the same resulting state are required. It then re-sends the committed signals; nothing is
committed again. A difference means the handler is not deterministic: it is logged with the
differences as ``NondeterministicHandler`` and the outcome is ``Outcome.NONDETERMINISTIC``;
the committed outputs, which are the ones sent, stand.

Handlers must be deterministic: use ``ctx.now()``, ``ctx.random()``, ``ctx.new_id()``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel

from shared.bus.context import HandlerContext, PendingOutput
from shared.bus.envelope import Signal
from shared.bus.ids import json_sha256, stable_seed
from shared.bus.messages import Event, Message, body_of
from shared.bus.modes.common import (
    CommitRow,
    ModePipeline,
    check_page_size,
    drop_abandoned_tokens,
    state_operation,
)
from shared.bus.modes.errors import NondeterministicHandler
from shared.bus.pipeline import Incoming, Outcome
from shared.bus.records import STATE_ROW, AuditRecord, json_property
from shared.bus.state.damaged import ROW_ERRORS, DamagedRow, OnDamaged, pass_over
from shared.bus.state.rows import EndpointRows
from shared.clock import to_datetime
from shared.errors import CorruptRecord, InvalidValue, PreconditionFailed
from shared.stores.blob import BlobContainer
from shared.stores.table import Entity, Insert, TableOperation

log = logging.getLogger(__name__)

VERSION_PREFIX = "version|"
INDEX_PREFIX = "msgidx|"


def version_row(version: int) -> str:
    return f"{VERSION_PREFIX}{version:019d}"  # fixed width: RowKey order is version order


def index_row(message_id: str) -> str:
    return f"{INDEX_PREFIX}{message_id}"


_SORTED = json.JSONEncoder(sort_keys=True)
"""The JSON text an output's fingerprint hashes (as ``json.dumps(..., sort_keys=True)``)."""


def fingerprint(outputs: list[PendingOutput]) -> list[dict[str, str]]:
    """What a replay must reproduce of each output, in order. Destinations are compared as the
    handler named them (an endpoint, or a topic): subscribers joining later are not the
    handler's doing. Message ids derive from the incoming id, the index and the destination,
    so equal fingerprints mean equal ids."""
    result = []
    for output in outputs:
        message = output.message
        target = output.to if output.to is not None else f"topic:{_topic(message)}"
        canonical = {"body": body_of(message), "headers": output.headers}
        result.append(
            {
                "type": message.type_name(),
                "to": target,
                "sha256": json_sha256(canonical, _SORTED),
            }
        )
    return result


def _topic(message: Message) -> str:
    # Only HandlerContext.publish makes an output without a destination, and it checks at run
    # time that it was given an Event.
    return cast(Event, message).topic()


@dataclass(frozen=True)
class Version:
    partition_key: str
    version: int
    message_id: str
    committed_at: datetime
    now: datetime
    """The handler's ``ctx.now()``, captured for replays."""
    seed: int
    """The seed of the handler's ``ctx.random()``, captured for replays."""
    data: str
    outputs: list[dict[str, str]]

    def to_entity(self) -> Entity:
        return Entity(
            self.partition_key,
            version_row(self.version),
            {
                "message_id": self.message_id,
                "committed_at": self.committed_at,
                "now": self.now,
                "seed": str(self.seed),  # 64 unsigned bits do not fit Edm.Int64
                "data": self.data,
                "outputs": json_property("outputs", json.dumps(self.outputs)),
            },
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> Version:
        committed_at, now = entity["committed_at"], entity["now"]
        if not isinstance(committed_at, datetime) or not isinstance(now, datetime):
            raise CorruptRecord(
                f"state row {entity.partition_key!r}/{entity.row_key!r}: "
                f"committed_at {committed_at!r}, now {now!r}"
            )
        return cls(
            entity.partition_key,
            int(entity.row_key[len(VERSION_PREFIX) :]),
            str(entity["message_id"]),
            committed_at,
            now,
            int(str(entity["seed"])),
            str(entity["data"]),
            json.loads(str(entity["outputs"])),
        )


@dataclass(frozen=True, kw_only=True)
class IndexEntry(CommitRow):
    """The message-id index row: which version message m produced, and what it committed."""

    version: int

    def to_entity(self) -> Entity:
        return Entity(
            self.partition_key,
            index_row(self.message_id),
            {"version": self.version, **self.commit_properties()},
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> IndexEntry:
        version = entity["version"]
        if not isinstance(version, int):
            raise CorruptRecord(
                f"index row {entity.partition_key!r}/{entity.row_key!r}: version {version!r}"
            )
        return cls(version=version, **CommitRow.commit_fields(entity, INDEX_PREFIX))


class StateBasedPipeline(ModePipeline):
    mode = "state_based"

    async def _round(self, signal: Signal, incoming: Incoming, abandoned: list[str]) -> Outcome:
        m, p = signal.message_id, signal.partition_key
        rows = await self._read_partition_rows(p, index_row(m))
        indexed = rows.get(index_row(m))
        if indexed is not None:
            return await self._replay(signal, incoming, IndexEntry.from_entity(indexed))
        envelope, message = await self._body(incoming)
        head = rows.get(STATE_ROW)
        current = 0 if head is None else int(str(head["version"]))
        state = self._load_state(None if head is None else str(head["data"]))
        now = to_datetime(self.config.clock())
        seed = stable_seed(m, "random")
        async with self.rows.begin() as transaction:
            context = await self._run_handler(
                envelope, message, state, now=now, seed=seed, sql=transaction.sql
            )
            created = await self._create_outputs(context, envelope, index_row(m), abandoned)
            committed_at = to_datetime(self.config.clock())
            data = state.model_dump_json()
            version = Version(
                p, current + 1, m, committed_at, now, seed, data, fingerprint(context.outputs)
            )
            entry = IndexEntry(
                partition_key=p,
                message_id=m,
                version=current + 1,
                committed_at=committed_at,
                outgoing=tuple(created.committed_candidates),
                abandoned=tuple(sorted(set(abandoned))),
            )

            def build() -> tuple[list[TableOperation], AuditRecord]:
                operations = [
                    state_operation(head, self._state_entity(p, state, version=current + 1)),
                    Insert(version.to_entity()),
                    Insert(entry.to_entity()),
                ]
                return operations, self._audit(envelope, entry.outgoing, committed_at)

            await self._commit(transaction, build, created, abandoned)
        await self._finish(entry.outgoing, signal, created.hints)
        return Outcome.PROCESSED

    async def _replay(self, signal: Signal, incoming: Incoming, entry: IndexEntry) -> Outcome:
        """A copy of a processed message: re-run the handler on the version before it and
        check that it reproduces the committed run, then re-send the committed signals.

        A copy whose body is a shared payload not read yet re-sends without the check: a
        duplicate reads nothing of its payload (anyone with queue send can make copies, and
        each would download the whole body for a check that changes nothing committed)."""
        if incoming.message is None:
            log.debug(
                "endpoint %s: copy of message %s re-sends its committed outputs without the "
                "replay check (its body is a shared payload, not read for a duplicate)",
                self.endpoint.name,
                entry.message_id,
            )
            await self._finish(entry.outgoing, signal)
            return Outcome.RESUMED
        envelope, message = incoming.envelope, incoming.message
        n = entry.version
        wanted = [version_row(n)] + ([version_row(n - 1)] if n > 1 else [])
        rows = await self.rows.read(entry.partition_key, wanted)
        produced = rows.get(version_row(n))
        before = rows.get(version_row(n - 1)) if n > 1 else None
        outcome = Outcome.RESUMED
        if produced is None or (n > 1 and before is None):
            log.warning(
                "endpoint %s: versions around %d of partition %r were truncated; re-sending "
                "the committed outputs of message %s without a replay check",
                self.endpoint.name,
                n,
                entry.partition_key,
                entry.message_id,
            )
        else:
            committed = Version.from_entity(produced)
            restored = self._load_state(None if before is None else str(before["data"]))
            async with self.rows.begin() as transaction:
                # Never committed: whatever the replay writes through ctx.sql is rolled back.
                context = await self._run_handler(
                    envelope,
                    message,
                    restored,
                    now=committed.now,
                    seed=committed.seed,
                    sql=transaction.sql,
                )
            differences = compare_replay(committed, context)
            if differences:
                error = NondeterministicHandler(self.endpoint.name, entry.message_id, differences)
                log.error("%s", error)
                outcome = Outcome.NONDETERMINISTIC
        await self._finish(entry.outgoing, signal)
        return outcome


def compare_replay(committed: Version, replay: HandlerContext[Any]) -> list[str]:
    """Every way the replay differs from the committed run, in words."""
    differences: list[str] = []
    again = fingerprint(replay.outputs)
    if len(again) != len(committed.outputs):
        differences.append(f"{len(committed.outputs)} outputs committed, {len(again)} on replay")
    for index, (first, second) in enumerate(zip(committed.outputs, again, strict=False)):
        if first != second:
            differences.append(
                f"output {index}: committed {first['type']} to {first['to']} "
                f"(body sha256 {first['sha256'][:12]}), replay {second['type']} to "
                f"{second['to']} (body sha256 {second['sha256'][:12]})"
            )
    state: BaseModel = replay.state
    if state.model_dump_json() != committed.data:
        differences.append(f"the state after version {committed.version} differs")
    return differences


async def truncate_state_streams(
    rows: EndpointRows,
    *,
    tokens: BlobContainer,
    older_than: datetime,
    page_size: int = 100,
    continuation: str | None = None,
    on_damaged: OnDamaged | None = None,
) -> tuple[int, str | None]:
    """Truncate every partition's stream: remove version k (and the index row of the message
    that produced it) once version k+1 was committed before ``older_than`` (now minus
    ``BusConfig.state_stream_retention_seconds``). So the latest version always stays, and so
    does the version before every message still inside the window, which its duplicate needs
    for the replay. Reads one page of up to ``page_size`` (at least 2) version rows per call;
    returns how many versions were removed and the continuation (None when done).

    Uncommitted tokens of a removed message's rounds are deleted first (see
    ``drop_abandoned_tokens``); if one is younger than ``older_than`` the version stays.

    A late duplicate beyond the window finds no index row. Its incoming token is normally gone
    (deleted right after the first processing) and it is acknowledged without reading
    anything; only a message whose first processing committed but never finished and that is
    replayed after truncation is processed again, on the latest state. A duplicate whose own
    version survives but whose previous one is gone (truncation racing it) re-sends the
    committed outputs without the replay check.

    A version or index row that cannot be read goes to ``on_damaged`` and stays, and so does
    a version whose index row is the damaged one. A damaged version is
    passed over as if absent: the one after it was committed later still, so it says as
    well as the damaged one whether the version before may go.
    """
    check_page_size(page_size, minimum=2)
    removed = 0
    seen = 0

    def damaged(row: DamagedRow) -> None:
        nonlocal seen
        seen += 1  # a damaged row is one of the page's rows all the same
        pass_over(on_damaged, row)

    continuation, pending = await _resume(rows, continuation, on_damaged)
    while True:
        entities, following = await rows.page(
            row_key_prefix=VERSION_PREFIX,
            page_size=page_size,
            continuation=continuation,
            on_damaged=damaged,
        )
        for entity in entities:
            seen += 1
            try:
                successor = Version.from_entity(entity)
            except ROW_ERRORS as e:
                pass_over(on_damaged, rows.damaged(entity, e))
                continue
            if (
                pending is not None
                and pending.partition_key == entity.partition_key
                and successor.committed_at < older_than
                and await _remove_judged(rows, tokens, pending, older_than, on_damaged)
            ):
                removed += 1
            pending = entity
        if following is None:
            return removed, None  # the last version of the last partition stays
        continuation = following
        if seen >= page_size and pending is not None:
            # Whether ``pending`` is its partition's latest version is decided by the row
            # after it: the next call reads ``pending`` again and goes on after it.
            marker = {"next": following, "pending": [pending.partition_key, pending.row_key]}
            return removed, json.dumps(marker)


async def _resume(
    rows: EndpointRows, continuation: str | None, on_damaged: OnDamaged | None
) -> tuple[str | None, Entity | None]:
    """The store's page continuation and the version still waiting for its successor, from
    a continuation ``truncate_state_streams`` returned (opaque text to its callers)."""
    if continuation is None:
        return None, None
    try:
        marker = json.loads(continuation)
    except ValueError as e:
        raise InvalidValue(f"malformed continuation {continuation!r}") from e
    if not isinstance(marker, dict) or "pending" not in marker:
        # A page continuation as earlier versions returned it (a cleanup checkpoint written
        # before an upgrade): go on from there, with no version waiting.
        return continuation, None
    try:
        following, (partition_key, row_key) = str(marker["next"]), marker["pending"]
    except (ValueError, TypeError, KeyError) as e:
        raise InvalidValue(f"malformed continuation {continuation!r}") from e
    try:
        found = await rows.read(str(partition_key), [str(row_key)])
    except ROW_ERRORS as e:  # damaged since it was read: it stays, and nothing waits
        pass_over(on_damaged, rows.damaged_at(str(partition_key), str(row_key), e))
        return following, None
    return following, found.get(str(row_key))  # gone meanwhile: nothing waits


async def _remove_judged(
    rows: EndpointRows,
    tokens: BlobContainer,
    pending: Entity,
    older_than: datetime,
    on_damaged: OnDamaged | None,
) -> bool:
    """Remove the version ``pending`` (its successor is old enough), unless it or its index
    row cannot be read: then both stay, and the one that cannot is reported."""
    try:
        version = Version.from_entity(pending)
    except ROW_ERRORS as e:  # damaged since it was paged (a resumed pass reads it again)
        pass_over(on_damaged, rows.damaged(pending, e))
        return False
    try:
        return await _remove_version(rows, tokens, version, pending.etag, older_than)
    except ROW_ERRORS as e:
        index = rows.damaged_at(version.partition_key, index_row(version.message_id), e)
        pass_over(on_damaged, index)
        return False


async def _remove_version(
    rows: EndpointRows, tokens: BlobContainer, version: Version, etag: str, older_than: datetime
) -> bool:
    found = await rows.read(version.partition_key, [index_row(version.message_id)])
    indexed = found.get(index_row(version.message_id))
    entry = None if indexed is None else IndexEntry.from_entity(indexed)
    attempts = entry.committed_attempts if entry is not None else frozenset()
    if not await drop_abandoned_tokens(
        tokens, rows.name, version.message_id, attempts, older_than=older_than
    ):
        return False
    # The index first: a version without its index row is never looked up.
    await rows.delete(version.partition_key, index_row(version.message_id))
    try:
        await rows.delete(version.partition_key, version_row(version.version), etag=etag)
    except PreconditionFailed:
        return False
    return True
