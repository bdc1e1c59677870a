"""Known-bad variants of the pipeline: each removes one rule of design notes section 3, and
the simulator must find the violation that rule prevents. They prove the checker can fail.

The code under test is neither edited nor patched: a variant wraps the stores the bus and
the cleanup use (the bus is built over whatever account it is given), or sets the cleanup's
configuration (its retention), the two seams the code already has. The effect variants
change what is the simulator's own: the application it runs (``lab.sim.model``) and the
adapter of its provider (``lab.sim.provider``).

The variants of the window modes each break what one reading of the invariants checks
(``lab.sim.invariants``): the dedup record committed with the state, the state committed
with the record, the signals the record commits, the state-based stream, and the retention
that bounds the residue.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel

from lab.sim.documents import (
    DocumentsWrapper,
    RowVersionsUnchecked,
    UnconditionalDocuments,
)
from lab.sim.model import Version
from shared.bus.app import Mode
from shared.bus.cancel import Canceller
from shared.bus.context import HandlerContext
from shared.bus.envelope import TOKEN_NAME, Envelope, token_prefix
from shared.bus.ingress import INGRESS_ROW, SCOPE_SEPARATOR
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX
from shared.bus.modes.state_based import INDEX_PREFIX, VERSION_PREFIX
from shared.bus.outgoing import CreatedTokens, send_signals
from shared.bus.payloads import payload_name
from shared.bus.pipeline import IncomingToken, Outcome
from shared.bus.poison import NEVER_EXPIRES
from shared.bus.receiver import Receiver
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX, STATE_ROW, OutboxRecord
from shared.bus.saga import SAGA_ROW_TYPE, SagaRow, SagaTurn
from shared.bus.session import Session
from shared.bus.session_records import SESSION_PREFIX, SessionRecord
from shared.bus.state.base import StateRow, StateWrite
from shared.bus.state.rows import EndpointRows
from shared.cleanup.base import CleanupContext, CleanupTask, clear_prefix
from shared.cleanup.report import TaskReport
from shared.cleanup.sessions import SessionRecords
from shared.effects.markers import MARKER_ROW
from shared.errors import (
    AlreadyExists,
    InvalidName,
    NotFound,
    OutcomeUnknown,
    StorageError,
    TooLarge,
)
from shared.resources import POISON_SUFFIX
from shared.stores.account import StorageAccount
from shared.stores.blob import ANY_ETAG, Blob, BlobContainer, BlobPage, BlobProperties
from shared.stores.delegating import (
    DelegatingAccount,
    DelegatingBlobContainer,
    DelegatingQueue,
    DelegatingTable,
)
from shared.stores.queue import MessageQueue, QueueMessage
from shared.stores.table import (
    Delete,
    Entity,
    Page,
    Table,
    TableOperation,
    Update,
    normalise_entity,
    operation_key,
)

CANCELLED = "cancelled"
"""The outcome of O(t) and the audit row a cancel commits."""

AccountWrapper = Callable[[StorageAccount], StorageAccount]

incoming_token: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "incoming_token", default=None
)
"""(container, token) named by the signal the current invocation is processing, set by the
simulator for variants that need to know it."""
endpoint_modes: contextvars.ContextVar[Mapping[str, Mode] | None] = contextvars.ContextVar(
    "endpoint_modes", default=None
)
"""Each endpoint's mode in the current run (a mixed-mode app's differ), set by the simulator
for variants that need to know it."""


T = TypeVar("T")


@dataclass(frozen=True)
class Variant:
    name: str
    rule: str
    """The rule of the protocol this variant breaks."""
    wrap: AccountWrapper | None = None
    retention: float | None = None
    """The retention (seconds) the cleanup is configured with instead of the dedup window."""
    poison_margin: float | None = None
    """The poison-expiry margin (seconds) the cleanup is configured with instead of its
    default (the parked phase)."""
    modes: tuple[Mode, ...] = ("token",)
    """The endpoint modes whose code this variant changes (it is explored only there)."""
    old_version: Version = "old"
    """What the rolling phase's old instances run (``lab.sim.model.Version``)."""
    old_window: float | None = None
    """The give-back window (seconds) of the rolling phase's old instances, if not the
    default."""
    attempt_keys: bool = False
    """The effect shape's provider is sent a key of its own on every call."""
    effect_before_commit: bool = False
    """The effect shape's handler calls the provider itself, before its round commits."""
    answer_outside: bool = False
    """The effect shape's performer sends each answer itself, outside its commit."""
    amo_retried: bool = False
    """The effect shape's at-most-once service is declared idempotent: retried after an
    unknown outcome, without a marker."""
    foreign_origins_own: bool = False
    """A system of two apps: each app's cleanup takes the other's tokens for its own, judging
    them by rows looked up in its own state store, where they are not."""
    session: type[Session] | None = None
    """The session phase: the transactional session its requests open instead of
    production's (a subclass in the lab)."""
    session_task: Callable[[str], CleanupTask] | None = None
    """The session phase: the cleanup's sessions task instead of production's."""
    receiver: type[Receiver] | None = None
    """The saga phase: the saga endpoint's token-mode receiver instead of production's (a
    subclass in the lab)."""
    canceller: type[Canceller] | None = None
    """The cancel phase: the client's canceller instead of production's (a subclass in the
    lab)."""
    documents: DocumentsWrapper | None = None
    """The document stores: wraps each endpoint's documents in the Cosmos DB model (the
    ``-cosmos`` configurations), below the fault injection."""


class _Blobs(DelegatingBlobContainer):
    """Passes every call to ``inner``; variants override what they change."""


class _Table(DelegatingTable):
    """Passes every call to ``inner``; variants override what they change."""


class _Queue(DelegatingQueue):
    """Passes every call to ``inner``; variants override what they change."""

    def __init__(self, inner: MessageQueue, account: StorageAccount) -> None:
        super().__init__(inner)
        self.account = account


class _Account(DelegatingAccount):
    def __init__(
        self,
        inner: StorageAccount,
        blobs: type[_Blobs] = _Blobs,
        table: type[_Table] = _Table,
        queue: type[_Queue] = _Queue,
    ) -> None:
        super().__init__(inner)
        self._blobs = blobs
        self._table = table
        self._queue = queue

    def blob_container(self, name: str) -> BlobContainer:
        return self._blobs(self.inner.blob_container(name))

    def table(self, name: str) -> Table:
        return self._table(self.inner.table(name))

    def queue(self, name: str) -> MessageQueue:
        return self._queue(self.inner.queue(name), self.inner)


# -- no claim step (R4) ----------------------------------------------------------------------


class _ClaimIgnored(_Blobs):
    """The claim write is never sent: set_metadata reports success (with the ETag it was
    given) without touching the blob."""

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        if "claim" not in metadata:
            return await super().set_metadata(name, metadata, etag=etag)
        return etag or '"unclaimed"'


NO_CLAIM = Variant(
    "no-claim",
    "R4: the token is claimed by compare-and-swap before the handler runs",
    wrap=lambda account: _Account(account, blobs=_ClaimIgnored),
)


# -- state committed without the outbox record (R5) ------------------------------------------


class _OutboxDropped(_Table):
    """The commit transaction loses its outbox-record update: state and audit row commit,
    O(m) stays as it was."""

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        dropped = [
            index
            for index, op in enumerate(operations)
            if isinstance(op, Update) and operation_key(op)[1].startswith(OUTBOX_PREFIX)
        ]
        if not dropped or len(dropped) == len(operations):
            return await self.inner.transact(operations)
        kept = [op for index, op in enumerate(operations) if index not in dropped]
        etags = iter(await self.inner.transact(kept))
        return [None if index in dropped else next(etags) for index in range(len(operations))]


NO_OUTBOX_IN_COMMIT = Variant(
    "no-outbox-in-commit",
    "R5: state and O(m) commit in one transaction",
    wrap=lambda account: _Account(account, table=_OutboxDropped),
)


# -- a message parked after part of its commit landed ---------------------------------------


class _RefusedInPart(_Table):
    """A transaction refused for a row's size still writes the rows that fit: the message
    is parked (a permanent failure) after part of its commit landed, where a real table
    transaction, refused, writes nothing."""

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        try:
            return await self.inner.transact(operations)
        except TooLarge:
            fitting = [op for op in operations if not _too_large(op)]
            if fitting:
                await self.inner.transact(fitting)
            raise


def _too_large(operation: TableOperation) -> bool:
    if isinstance(operation, Delete):
        return False
    try:
        normalise_entity(operation.entity)
    except TooLarge:
        return True
    return False


PARKED_AFTER_PARTIAL_COMMIT = Variant(
    "parked-after-partial-commit",
    "a message is parked at once only when nothing of its commit was written",
    wrap=lambda account: _Account(account, table=_RefusedInPart),
    # Entity-outbox mode refuses its oversized state row before the transaction is sent.
    modes=("token", "processed_messages", "state_based"),
)


# -- incoming token deleted before the signals are sent (R6/R7 swapped) ----------------------


class _DeleteBeforeSend(_Queue):
    """Every signal an invocation sends is preceded by deleting its incoming token."""

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        where = incoming_token.get()
        if where is not None:
            container, token = where
            with contextlib.suppress(NotFound):
                await self.account.blob_container(container).delete(token)
        return await super().send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )


DELETE_BEFORE_SEND = Variant(
    "delete-before-send",
    "R6 before R7: signals are sent before the incoming token is deleted",
    wrap=lambda account: _Account(account, queue=_DeleteBeforeSend),
)


# -- an attempt id reused after an unknown create outcome ------------------------------------


class _CreateRetriedUnderOneName(_Blobs):
    """A create with an unknown outcome is retried under the same name (the same attempt id),
    and a name that now exists is taken to be the earlier try's: the unsafe assumption."""

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        try:
            return await super().create(name, data, metadata)
        except OutcomeUnknown:
            pass
        try:
            return await super().create(name, data, metadata)
        except AlreadyExists:
            return (await self.get_properties(name)).etag


REUSED_ATTEMPT_ID = Variant(
    "reused-attempt-id",
    "attempt ids are at-most-once: never commit one whose create had an unknown outcome",
    wrap=lambda account: _Account(account, blobs=_CreateRetriedUnderOneName),
    # The late create re-creates a token its receiver deleted. A token-mode receiver leaves
    # the delete to the cleanup, a grace period after its commit: later than any late
    # request within the timing assumptions, so the variant breaks nothing there. The
    # window modes delete their incoming token inline.
    modes=("processed_messages", "state_based", "entity_outbox"),
)


# -- client sends: a lost race on the ingress record goes on to send ---------------------------


class _IngressRaceIgnored(_Table):
    """Inserting an ingress record that another send of the key inserted first reports
    success: both racing sends see no record, and both send."""

    async def insert(self, entity: Entity) -> str:
        try:
            return await super().insert(entity)
        except AlreadyExists:
            if entity.row_key != INGRESS_ROW:
                raise
            return '"lost-the-race"'


INGRESS_DOUBLE_SEND = Variant(
    "ingress-double-send",
    "R5 for clients: a send commits only by inserting (or ETag-updating) its key's record",
    wrap=lambda account: _Account(account, table=_IngressRaceIgnored),
    modes=("token", "processed_messages", "state_based", "entity_outbox"),
)


# -- client sends: one idempotency namespace for every sender --------------------------------


class _OneKeyNamespace(_Table):
    """The previous version's ingress records: keyed by the raw key whoever sends, and
    saying nothing of the sender's scope or message. A second sender that chose the key finds
    the first one's record and is answered with its receipt; its own message is never sent."""

    def _unscoped(self, partition_key: str) -> str:
        return partition_key.partition(SCOPE_SEPARATOR)[2] or partition_key

    async def get(self, partition_key: str, row_key: str) -> Entity:
        if row_key != INGRESS_ROW:
            return await super().get(partition_key, row_key)
        found = await super().get(self._unscoped(partition_key), row_key)
        kept = {k: v for k, v in found.properties.items() if k not in {"scope", "fingerprint"}}
        return dataclasses.replace(found, properties=kept)

    async def insert(self, entity: Entity) -> str:
        if entity.row_key == INGRESS_ROW:
            entity = dataclasses.replace(entity, partition_key=self._unscoped(entity.partition_key))
        return await super().insert(entity)

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        if entity.row_key == INGRESS_ROW:
            entity = dataclasses.replace(entity, partition_key=self._unscoped(entity.partition_key))
        return await super().update(entity, etag=etag)


INGRESS_ONE_NAMESPACE = Variant(
    "ingress-one-namespace",
    "a client's idempotency key is its sender's: one sender's record never answers another's",
    wrap=lambda account: _Account(account, table=_OneKeyNamespace),
)


class _LegacyRecordsIgnored(_Table):
    """The upgrade forgets the previous version's records: an ingress record under a raw key
    (no scope) is never found, so a retry after the upgrade sends its message anew."""

    async def get(self, partition_key: str, row_key: str) -> Entity:
        if row_key == INGRESS_ROW and SCOPE_SEPARATOR not in partition_key:
            raise NotFound(f"{self.name}/{partition_key}/{row_key}")
        return await super().get(partition_key, row_key)


INGRESS_LEGACY_IGNORED = Variant(
    "ingress-legacy-ignored",
    "a record the previous version wrote under the raw key still answers its sender's retry "
    "within its window",
    wrap=lambda account: _Account(account, table=_LegacyRecordsIgnored),
)


# -- a state written without its ETag (lost update) -------------------------------------------


def _state_without_etag(op: TableOperation) -> TableOperation | None:
    if isinstance(op, Update) and op.entity.row_key == STATE_ROW:
        return dataclasses.replace(op, etag=None)
    return op


# -- the cleanup: no fence, and O(m) retired while its incoming token exists -------------------


class _FenceSkipped(_Table):
    """The cleanup's fence (an unchanged rewrite of an uncommitted O(m), for a new ETag)
    reports success with the old ETag and writes nothing."""

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        if entity.row_key.startswith(OUTBOX_PREFIX) and etag is not None:
            return etag
        return await super().update(entity, etag=etag)


NO_CLEANUP_FENCE = Variant(
    "no-cleanup-fence",
    "cleanup: an uncommitted O(m) is fenced (new ETag) before its tokens are deleted",
    wrap=lambda account: _Account(account, table=_FenceSkipped),
)


TOKEN_PREFIX = re.compile(r"[a-z][a-z0-9]{2,39}/[0-9a-f-]{36}/")
"""A ``token_prefix``: the tokens of one sender's round for one incoming id."""


class _TokensLookGone(_Blobs):
    """Asked whether a token exists (the cleanup's question about an uncommitted O(m)), every
    token looks gone."""

    async def get_properties(self, name: str) -> BlobProperties:
        if TOKEN_NAME.fullmatch(name):
            raise NotFound(f"{name} (the variant hides every token from the cleanup)")
        return await super().get_properties(name)


RETIRED_BEFORE_R7 = Variant(
    "retired-before-r7",
    "cleanup: an uncommitted O(m) is retired only once its incoming token is gone",
    wrap=lambda account: _Account(account, blobs=_TokensLookGone),
)


class _OutputsLookClaimed(_Blobs):
    """Listed under a sender's prefix (the cleanup's question whether O(m)'s outputs were
    received), every token looks claimed."""

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        async for blob in super().list(prefix):
            if TOKEN_PREFIX.fullmatch(prefix) and not blob.metadata.get("claim"):
                blob = dataclasses.replace(blob, metadata={**blob.metadata, "claim": "seen"})
            yield blob


R7_BEFORE_OUTPUTS = Variant(
    "r7-before-outputs",
    "cleanup: token(a) is deleted (R7) only once every token O(m) committed is gone or "
    "claimed, hence signalled",
    wrap=lambda account: _Account(account, blobs=_OutputsLookClaimed),
)


class _OutputsUnlisted(_Blobs):
    """Listed under a sender's prefix (the cleanup's question whether O(m)'s outputs were
    received), the container shows nothing: as if O(m) went unlisted even when it committed
    outputs, where production skips the listing only for an O(m) that committed none."""

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        if TOKEN_PREFIX.fullmatch(prefix):
            return
        async for blob in super().list(prefix):
            yield blob


OUTPUTS_UNLISTED = Variant(
    "outputs-unlisted",
    "cleanup: a committed O(m) is retired without listing its prefix only when it committed "
    "no output",
    wrap=lambda account: _Account(account, blobs=_OutputsUnlisted),
)


class _IncomingKept(_Blobs):
    """A batch delete of blobs whatever their ETag (the cleanup's R7) answers that each was
    deleted, and deletes none."""

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        if blobs and all(etag == ANY_ETAG for _, etag in blobs):
            return [True] * len(blobs)
        return await super().delete_unchanged(blobs)


RETIRED_WITHOUT_R7 = Variant(
    "retired-without-r7",
    "cleanup: a committed O(m) is retired only after its incoming token is deleted (R7)",
    wrap=lambda account: _Account(account, blobs=_IncomingKept),
)


class _WindowSentKept(_Blobs):
    """The cleanup's R7 (a batch delete whatever the ETags) leaves every token a window-mode
    sender created, answering that it was deleted: as if such a token were its sender's to
    remove, as it is when a window-mode receiver deletes its incoming token itself. Only a
    token-mode receiver of a window-mode sender meets this (issue 42's residue), so only the
    pairings (``pair-<window mode>-token``) can catch it."""

    async def delete_unchanged(self, blobs: Sequence[tuple[str, str]]) -> list[bool]:
        if not blobs or any(etag != ANY_ETAG for _, etag in blobs):
            return await super().delete_unchanged(blobs)
        modes = endpoint_modes.get() or {}
        kept = [modes.get(name.split("/")[0], "token") != "token" for name, _ in blobs]
        others = [pair for pair, keep in zip(blobs, kept, strict=True) if not keep]
        deleted = iter(await super().delete_unchanged(others) if others else [])
        return [True if keep else next(deleted) for keep in kept]


R7_SKIPS_WINDOW_SENDERS = Variant(
    "r7-skips-window-senders",
    "cleanup: a token-mode receiver's incoming token is deleted by its R7 whichever mode its "
    "sender is in",
    wrap=lambda account: _Account(account, blobs=_WindowSentKept),
)


# -- the cleanup's shared-payload task (small-shared) ----------------------------------------


class _NoTokensListed(_Blobs):
    """Asked whether any token is left under a prefix (a listing of page size 1, the payload
    task's question), the tokens container answers none."""

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        if page_size == 1 and TOKEN_PREFIX.fullmatch(prefix):
            return BlobPage([], None)
        return await super().list_page(prefix, page_size=page_size, continuation=continuation)


PAYLOAD_REMOVED_WITH_TOKENS = Variant(
    "payload-removed-with-tokens",
    "cleanup: a shared payload is removed only once no token under its prefix is left",
    wrap=lambda account: _Account(account, blobs=_NoTokensListed),
)


class _PayloadsLookOld(_Blobs):
    """The payloads container lists every payload as written long ago: the payload task
    judges young payloads as if the grace period had passed."""

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        page = await super().list_page(prefix, page_size=page_size, continuation=continuation)
        if not self.name.startswith("payloads"):
            return page
        long_ago = datetime(2000, 1, 1, tzinfo=UTC)
        return BlobPage(
            [dataclasses.replace(b, last_modified=long_ago) for b in page.items],
            page.continuation,
        )


PAYLOAD_REMOVED_YOUNG = Variant(
    "payload-removed-young",
    "cleanup: a shared payload is removed only once older than the grace period",
    wrap=lambda account: _Account(account, blobs=_PayloadsLookOld),
    # Token mode's fence (before the token listing) covers a young payload too; the window
    # modes' origin rows appear only at their commit and have no fence to fall back on.
    modes=("token", "processed_messages", "state_based", "entity_outbox"),
)


class _PayloadReadEarly(_Blobs):
    """Reading a token reads its shared payload too, as receivers did before issue 42: before
    token mode's claim and before a window mode's duplicate check, so every copy reads it."""

    def __init__(self, inner: BlobContainer, payloads: BlobContainer) -> None:
        super().__init__(inner)
        self.payloads = payloads

    async def read(self, name: str) -> Blob:
        blob = await super().read(name)
        with contextlib.suppress(ValueError, InvalidName):  # not an envelope: the bus says so
            reference = Envelope.from_bytes(blob.data).payload
            if reference is not None:
                with contextlib.suppress(NotFound):
                    await self.payloads.read(payload_name(name, reference.digest))
        return blob


class _PayloadReadEarlyAccount(_Account):
    def blob_container(self, name: str) -> BlobContainer:
        container = self.inner.blob_container(name)
        if not name.startswith("tokens"):
            return container
        payloads = self.inner.blob_container(name.replace("tokens", "payloads", 1))
        return _PayloadReadEarly(container, payloads)


PAYLOAD_READ_EARLY = Variant(
    "payload-read-early",
    "receive: a shared payload is read only when the handler is about to run (after the "
    "claim, after a window mode's duplicate check)",
    wrap=_PayloadReadEarlyAccount,
    modes=("token", "processed_messages", "state_based", "entity_outbox"),
)


# -- the cleanup's poison task (the parked phase) ---------------------------------------------


class _PoisonAccount(_Account):
    """Remembers, across its queues, the poison entries received through it (content ->
    (id, pop receipt)), for the poison-queue variants."""

    def __init__(self, inner: StorageAccount, queue: type[_Queue]) -> None:
        super().__init__(inner, queue=queue)
        self.received: dict[str, tuple[str, str]] = {}

    def queue(self, name: str) -> MessageQueue:
        queue = super().queue(name)
        if isinstance(queue, _ReparkDeletesFirst):
            queue.received = self.received
        return queue


class _ReparkDeletesFirst(_Queue):
    """Re-parking deletes the entry before its copy is sent: a poison queue on which sending
    a received entry's content with no expiry first deletes that entry."""

    received: dict[str, tuple[str, str]]

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        batch = await super().receive(max_messages, visibility_timeout=visibility_timeout)
        if self.name.endswith(POISON_SUFFIX):
            self.received.update({m.content: (m.id, m.pop_receipt) for m in batch})
        return batch

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        held = self.received.pop(content, None)
        if held is not None and time_to_live == NEVER_EXPIRES:
            with contextlib.suppress(NotFound):
                await self.delete(*held)
        return await super().send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )


REPARK_DELETES_FIRST = Variant(
    "repark-deletes-first",
    "cleanup: an entry that will expire is re-parked by sending its copy before deleting it",
    wrap=lambda account: _PoisonAccount(account, _ReparkDeletesFirst),
)


class _PoisonCountsNone(_Queue):
    """A poison queue whose length reads 0: the pass takes what it held for all there is."""

    async def approximate_count(self) -> int:
        if self.name.endswith(POISON_SUFFIX):
            return 0
        return await super().approximate_count()


ORPHANS_UNCHECKED = Variant(
    "orphans-unchecked",
    "cleanup: parked originals are deleted only by a pass that held every poison entry",
    wrap=lambda account: _Account(account, queue=_PoisonCountsNone),
)
MARGIN_IGNORED = Variant(
    "margin-ignored",
    "cleanup: an entry is re-parked once it has less than the margin left, not at its expiry",
    poison_margin=0.0,
)

# -- window modes: commits that leave out or alter part of what they must write -------------

Rewrite = Callable[[TableOperation], TableOperation | None]


def _rewriting(rewrite: Rewrite) -> type[_Table]:
    """A table whose transactions pass every operation through ``rewrite`` (None: the
    operation is left out, and the others still commit together)."""

    class Rewriting(_Table):
        async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
            changed = [rewrite(op) for op in operations]
            kept = [op for op in changed if op is not None]
            if not kept:
                return [None] * len(operations)
            etags = iter(await self.inner.transact(kept))
            return [None if op is None else next(etags) for op in changed]

    return Rewriting


def _leave_out(*prefixes: str) -> Rewrite:
    def rewrite(op: TableOperation) -> TableOperation | None:
        return None if operation_key(op)[1].startswith(prefixes) else op

    return rewrite


def _state_without_outbox_map(op: TableOperation) -> TableOperation | None:
    if isinstance(op, Delete) or op.entity.row_key != STATE_ROW:
        return op
    if "outbox_parts" not in op.entity.properties:
        return op
    emptied = dataclasses.replace(StateEntity.from_entity(op.entity), entries={})
    return dataclasses.replace(op, entity=emptied.to_entity(1 << 30))


def _state_left_out(op: TableOperation) -> TableOperation | None:
    return None if operation_key(op)[1] == STATE_ROW else op


def _signals_unrecorded(op: TableOperation) -> TableOperation | None:
    if isinstance(op, Delete) or not op.entity.row_key.startswith(PROCESSED_PREFIX):
        return op
    entity = op.entity
    emptied = Entity(entity.partition_key, entity.row_key, {**entity.properties, "outgoing": "[]"})
    return dataclasses.replace(op, entity=emptied)


def _commit_variant(name: str, rule: str, mode: Mode, rewrite: Rewrite) -> Variant:
    table = _rewriting(rewrite)
    return Variant(name, rule, wrap=lambda account: _Account(account, table=table), modes=(mode,))


NO_PROCESSED_ROW = _commit_variant(
    "no-processed-row",
    "processed_messages: processed|{m} commits with the state",
    "processed_messages",
    _leave_out(PROCESSED_PREFIX),
)
NO_PROCESSED_OR_AUDIT_ROW = _commit_variant(
    "no-processed-or-audit-row",
    "processed_messages: processed|{m} commits with the state, and so does audit|{m}, whose "
    "insert otherwise stops a second commit",
    "processed_messages",
    _leave_out(PROCESSED_PREFIX, AUDIT_PREFIX),
)
NO_STATE_WITH_RECORD = _commit_variant(
    "no-state-with-record",
    "processed_messages: the state change commits with processed|{m}",
    "processed_messages",
    _state_left_out,
)
SIGNALS_UNRECORDED = _commit_variant(
    "signals-unrecorded",
    "processed_messages: processed|{m} records the signals its commit created",
    "processed_messages",
    _signals_unrecorded,
)
NO_INDEX_ROW = _commit_variant(
    "no-index-row",
    "state_based: msgidx|{m} commits with the version",
    "state_based",
    _leave_out(INDEX_PREFIX),
)
NO_VERSION_ROW = _commit_variant(
    "no-version-row",
    "state_based: version|{n} commits with the state row",
    "state_based",
    _leave_out(VERSION_PREFIX),
)
NO_OUTBOX_ENTRY = _commit_variant(
    "no-outbox-entry",
    "entity_outbox: the entry for m commits inside the state row",
    "entity_outbox",
    _state_without_outbox_map,
)


LOST_UPDATE = _commit_variant(
    "state-without-etag",
    "R5: the state is written If-Match its ETag (else a concurrent update is lost)",
    "token",
    _state_without_etag,
)
NO_RETENTION = Variant(
    "no-retention",
    "window modes: the cleanup removes dedup records older than the retention period",
    retention=100 * 365 * 24 * 3600.0,
    modes=("processed_messages", "state_based", "entity_outbox"),
)

# -- giving back a newer version's message (the rolling phase) -------------------------------

received: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "received", default=None
)
"""(queue, id, pop receipt) of the message the current invocation received."""


class _GiveBackAcknowledgedFirst(_Queue):
    """A give-back acknowledges the copy it holds before it sends the signal again: a queue on
    which sending a signal with a give-back count first deletes the received message."""

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        batch = await super().receive(max_messages, visibility_timeout=visibility_timeout)
        for message in batch:
            received.set((self.name, message.id, message.pop_receipt))
        return batch

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        held = received.get()
        if held is not None and held[0] == self.name and '"given_back"' in content:
            with contextlib.suppress(NotFound):
                await self.delete(held[1], held[2])
        return await super().send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )


GIVE_BACK_ACKNOWLEDGED_FIRST = Variant(
    "give-back-acknowledged-first",
    "give-back: the signal is sent again before the copy held is acknowledged",
    wrap=lambda account: _Account(account, queue=_GiveBackAcknowledgedFirst),
)
GIVE_BACK_PARKS_AT_ONCE = Variant(
    "give-back-parks-at-once",
    "give-back: an old instance gives a newer version's message back rather than park it",
    old_window=0.0,
)
GIVE_BACK_MISREADS = Variant(
    "give-back-misreads",
    "give-back: an old instance never processes a message it cannot read",
    old_version="old-misreading",
)

held_text: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "held_text", default=None
)
"""(queue, content) of the message the current invocation received."""


class _PostponedUnsent(_Queue):
    """A postponed message is acknowledged without its signal sent again: a queue on which
    sending, to the queue it came from, the very text of the message the invocation holds
    does nothing (only a postponement sends a signal back unchanged)."""

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        batch = await super().receive(max_messages, visibility_timeout=visibility_timeout)
        for message in batch:
            held_text.set((self.name, message.content))
        return batch

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        if held_text.get() == (self.name, content):
            return "dropped"
        return await super().send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )


POSTPONED_UNSENT = Variant(
    "postponed-unsent",
    "body budget: a postponed message's signal is sent again before its copy is acknowledged",
    wrap=lambda account: _Account(account, queue=_PostponedUnsent),
    modes=("token", "processed_messages", "state_based", "entity_outbox"),
)

EFFECT_ATTEMPT_KEY = Variant(
    "effect-attempt-key",
    "an effect's idempotency key is the same on every call (derived from the message and the "
    "effect's position, never from an attempt)",
    attempt_keys=True,
)
EFFECT_BEFORE_COMMIT = Variant(
    "effect-before-commit",
    "an effect is performed only after the round that requested it committed",
    effect_before_commit=True,
)
ANSWER_OUTSIDE_OUTBOX = Variant(
    "answer-outside-outbox",
    "an effect's answer is an output of the performer's commit, so it is processed once",
    answer_outside=True,
)

AMO_RETRIED = Variant(
    "amo-retried",
    "a service that honours no key is called once per effect: never again after an unknown "
    "outcome (it is answered uncertain)",
    amo_retried=True,
)


class _BlindMarker(_Table):
    """An at-most-once marker is written whether or not it is there: every copy calls."""

    async def insert(self, entity: Entity) -> str:
        if entity.row_key == MARKER_ROW:
            return await self.inner.upsert(entity)
        return await self.inner.insert(entity)


AMO_BLIND_MARKER = Variant(
    "amo-blind-marker",
    "an at-most-once effect's marker is inserted if absent: only the copy that inserts it calls",
    wrap=lambda account: _Account(account, table=_BlindMarker),
)

# -- the state store down (small-state-outage) -----------------------------------------------


class _SilenceAsRefusal(_Table):
    """A table request that got no answer is reported as one the service refused: the
    failure table cannot tell the state store's outage from an ordinary failure, so each
    delivery in the outage spends one of the host's tries."""

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except OutcomeUnknown as e:
            raise StorageError(f"{target}: {e}") from e


STATE_OUTAGE_SPENDS_TRIES = Variant(
    "state-outage-spends-tries",
    "a message waits while the state store does not answer, without spending its tries; it "
    "is never parked for that alone",
    wrap=lambda account: _Account(account, table=_SilenceAsRefusal),
)

# -- a system of two apps (small-two-apps) ---------------------------------------------------

FOREIGN_ORIGINS_JUDGED = Variant(
    "foreign-origins-judged",
    "cleanup: an app's cleanup judges only the tokens whose origin is its own endpoints' or "
    "its ingress table's; another app's are kept for that app's cleanup",
    foreign_origins_own=True,
)

# -- transactional sessions (the session phase, lab.sim.sessions) ------------------------------


class _SignalsFirst(Session):
    """Signals its messages as its block ends, before its commit, and so whether or not the
    commit comes: the commit then names the tokens already signalled."""

    _early: CreatedTokens | None = None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._outputs and not self.deduplicated and self._opened is not None:
            self._early = await super()._create_tokens(self.round_id, [])
            early = self._early
            await send_signals(
                self._account, tuple(early.committed_candidates), early.hints, config=self._config
            )
        await super().__aexit__(kind, error, traceback)

    async def _create_tokens(self, round_id: str, abandoned: list[str]) -> CreatedTokens:
        if self._early is None:
            return await super()._create_tokens(round_id, abandoned)
        abandoned.extend(self._early.abandoned)
        return self._early


SESSION_SIGNALS_FIRST = Variant(
    "session-signals-first",
    "session: the signals are sent only after the commit (S5 after S4)",
    session=_SignalsFirst,
)


class _KeyIgnored(Session):
    """A session whose identity leaves its key out: every request, a retry too, gets a
    record of its own, so a retry never finds the first one's committed O(s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session_id = self._config.new_id()


SESSION_KEY_IGNORED = Variant(
    "session-key-ignored",
    "session: a retry under the same key finds the first request's O(s) (S1) and, committed, "
    "writes and sends nothing new",
    session=_KeyIgnored,
)


class _NotResent(SessionRecords):
    """The sessions task never signals a committed O(s) its request left unsignalled."""

    async def _finish(
        self,
        context: CleanupContext,
        rows: EndpointRows,
        record: SessionRecord,
        report: TaskReport,
    ) -> None:
        report.kept["signalling"] += 1


SESSION_NOT_RESENT = Variant(
    "session-not-resent",
    "cleanup: a committed O(s) left unsignalled has its signals sent after the resend delay",
    session_task=_NotResent,
)


class _TokensBeforeRecord(SessionRecords):
    """An open O(s) older than the grace period has its tokens deleted and is itself kept
    (for a later pass), instead of being deleted first."""

    async def _judge(
        self,
        context: CleanupContext,
        rows: EndpointRows,
        record: SessionRecord,
        report: TaskReport,
    ) -> str | None:
        if record.committed or not context.is_old(record.started_at):
            return await super()._judge(context, rows, record, report)
        prefix = token_prefix(self.endpoint, record.round_id)
        await clear_prefix(context, prefix, frozenset(), report)
        return None


class _SessionFenceSkipped(_Table):
    """The abandoned-tokens task's fence of an open O(s) (an unchanged rewrite, for a new
    ETag) reports success with the old ETag and writes nothing."""

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        opened = entity.row_key.startswith(SESSION_PREFIX) and entity.get("status") == "open"
        if opened and etag is not None:
            return etag
        return await super().update(entity, etag=etag)


SESSION_TOKENS_BEFORE_RECORD = Variant(
    "session-tokens-before-record",
    "cleanup: an open O(s) is deleted (or fenced) before its tokens are, so that a commit "
    "stalled past the grace period fails",
    wrap=lambda account: _Account(account, table=_SessionFenceSkipped),
    session_task=_TokensBeforeRecord,
)

# -- sagas (the saga phase, lab.sim.sagas) ------------------------------------------------------


def _marker_as_delete(op: TableOperation) -> TableOperation | None:
    """A write of a saga instance's completed marker becomes the row's delete."""
    if isinstance(op, Delete) or op.entity.row_key != STATE_ROW:
        return op
    entity = op.entity
    if entity.get("type") != SAGA_ROW_TYPE:
        return op
    if not SagaRow.decode(str(entity["data"]), "a saga's commit").completed:
        return op
    etag = op.etag if isinstance(op, Update) else None
    return Delete(entity.partition_key, STATE_ROW, etag)


SAGA_COMPLETION_DELETES = Variant(
    "saga-completion-deletes",
    "saga: a completion replaces the instance's row by its completed marker, not by nothing",
    wrap=lambda account: _Account(account, table=_rewriting(_marker_as_delete)),
)


class _MarkerIgnoredByStarters(Receiver):
    """A starting message takes a completed marker for no instance and starts one over it."""

    def _turn(self, envelope: Envelope, stored: StateRow | None) -> SagaTurn | None:
        turn = super()._turn(envelope, stored)
        saga = self.endpoint.saga
        if turn is None or saga is None or turn.row is None or not turn.row.completed:
            return turn
        if self.endpoint.current_name(envelope.type) not in saga.started_by:
            return turn
        return SagaTurn("instance", None, self.endpoint.state_type())


SAGA_MARKER_IGNORED = Variant(
    "saga-marker-ignored",
    "saga: a starting message for a completed instance is saga_not_found (the marker is an "
    "instance, ended)",
    receiver=_MarkerIgnoredByStarters,
)


class _NotFoundWritesState(Receiver):
    """A message that found no instance writes the default state all the same."""

    def _state_write(
        self,
        envelope: Envelope,
        turn: SagaTurn | None,
        state: BaseModel,
        context: HandlerContext[Any] | None,
        stored: StateRow | None,
    ) -> tuple[StateWrite | None, Outcome]:
        write, outcome = super()._state_write(envelope, turn, state, context, stored)
        if turn is None or turn.role != "not_found":
            return write, outcome
        row = SagaRow(state=state.model_dump(mode="json"), started_by=envelope.id)
        expected = None if stored is None else stored.version
        return StateWrite(envelope.partition_key, SAGA_ROW_TYPE, row.to_json(), expected), outcome


SAGA_NOT_FOUND_WRITES = Variant(
    "saga-not-found-writes",
    "saga: a message that finds no instance writes nothing of it",
    receiver=_NotFoundWritesState,
)

# -- cancellation (the cancel phase, lab.sim.cancels) -------------------------------------------


def _cancels(operations: Sequence[TableOperation]) -> bool:
    """Whether a transaction is a cancel's C5: it inserts an audit row saying cancelled."""
    return any(
        not isinstance(op, Delete)
        and op.entity.row_key.startswith(AUDIT_PREFIX)
        and op.entity.get("outcome") == CANCELLED
        for op in operations
    )


class _CancelUncommitted(_Table):
    """A cancel's commit of O(t) and its audit row is reported done and never written."""

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        if _cancels(operations):
            return [None] * len(operations)
        return await self.inner.transact(operations)


CANCEL_UNCOMMITTED = Variant(
    "cancel-uncommitted",
    "cancel: the canceller answers cancelled only once O(t) is committed saying so (C5)",
    wrap=lambda account: _Account(account, table=_CancelUncommitted),
)


class _ClaimlessCanceller(Canceller):
    """Skips C4: commits O(t) without claiming t's token first."""

    async def _claim(self, token: IncomingToken, outbox: OutboxRecord) -> None:
        return


CANCEL_WITHOUT_CLAIM = Variant(
    "cancel-without-claim",
    "cancel: the canceller claims t's token (C4) before it commits O(t)",
    canceller=_ClaimlessCanceller,
)


def _cancel_unread(entity: Entity) -> Entity:
    """O(t) committed by a cancel, as a reader that ignores the cancel sees it: claimed."""
    if not entity.row_key.startswith(OUTBOX_PREFIX) or entity.get("outcome") != CANCELLED:
        return entity
    kept = {k: v for k, v in entity.properties.items() if k not in ("committed_at", "outcome")}
    return Entity(entity.partition_key, entity.row_key, {**kept, "status": "claimed"})


class _CancelIgnored(_Table):
    """The receiver reads a committed cancelled O(t) as one still claimed, and so runs t."""

    async def get(self, partition_key: str, row_key: str) -> Entity:
        return _cancel_unread(await self.inner.get(partition_key, row_key))

    async def query(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
        continuation: str | None = None,
    ) -> Page:
        page = await self.inner.query(
            partition_key=partition_key,
            row_key_prefix=row_key_prefix,
            row_keys=row_keys,
            page_size=page_size,
            continuation=continuation,
        )
        return dataclasses.replace(page, entities=[_cancel_unread(e) for e in page.entities])


RECEIVER_IGNORES_CANCEL = Variant(
    "cancel-ignored-by-receiver",
    "cancel: a receiver that finds O(t) committed as cancelled runs nothing of t",
    wrap=lambda account: _Account(account, table=_CancelIgnored),
)

# -- document stores (the -cosmos configurations, lab.sim.documents) ----------------------------

DOCUMENT_UNCONDITIONAL = Variant(
    "document-unconditional",
    "document stores: a partition's document is written only while unchanged (If-Match, "
    "If-None-Match), so no write of the partition is lost",
    documents=UnconditionalDocuments,
)
ROW_VERSION_IGNORED = Variant(
    "row-version-ignored",
    "document stores: a row's own version is checked inside the document, not only the "
    "document's ETag",
    documents=RowVersionsUnchecked,
)

VARIANTS = {
    v.name: v
    for v in (
        NO_CLAIM,
        NO_OUTBOX_IN_COMMIT,
        PARKED_AFTER_PARTIAL_COMMIT,
        DELETE_BEFORE_SEND,
        REUSED_ATTEMPT_ID,
        INGRESS_DOUBLE_SEND,
        INGRESS_ONE_NAMESPACE,
        INGRESS_LEGACY_IGNORED,
        LOST_UPDATE,
        NO_CLEANUP_FENCE,
        RETIRED_BEFORE_R7,
        R7_BEFORE_OUTPUTS,
        OUTPUTS_UNLISTED,
        RETIRED_WITHOUT_R7,
        R7_SKIPS_WINDOW_SENDERS,
        NO_PROCESSED_ROW,
        NO_PROCESSED_OR_AUDIT_ROW,
        NO_STATE_WITH_RECORD,
        SIGNALS_UNRECORDED,
        NO_INDEX_ROW,
        NO_VERSION_ROW,
        NO_OUTBOX_ENTRY,
        NO_RETENTION,
        REPARK_DELETES_FIRST,
        ORPHANS_UNCHECKED,
        MARGIN_IGNORED,
        PAYLOAD_REMOVED_WITH_TOKENS,
        PAYLOAD_REMOVED_YOUNG,
        PAYLOAD_READ_EARLY,
        POSTPONED_UNSENT,
        STATE_OUTAGE_SPENDS_TRIES,
        GIVE_BACK_ACKNOWLEDGED_FIRST,
        GIVE_BACK_PARKS_AT_ONCE,
        GIVE_BACK_MISREADS,
        EFFECT_ATTEMPT_KEY,
        EFFECT_BEFORE_COMMIT,
        ANSWER_OUTSIDE_OUTBOX,
        AMO_RETRIED,
        AMO_BLIND_MARKER,
        FOREIGN_ORIGINS_JUDGED,
        SESSION_SIGNALS_FIRST,
        SESSION_KEY_IGNORED,
        SESSION_NOT_RESENT,
        SESSION_TOKENS_BEFORE_RECORD,
        SAGA_COMPLETION_DELETES,
        SAGA_MARKER_IGNORED,
        SAGA_NOT_FOUND_WRITES,
        CANCEL_UNCOMMITTED,
        CANCEL_WITHOUT_CLAIM,
        RECEIVER_IGNORES_CANCEL,
        DOCUMENT_UNCONDITIONAL,
        ROW_VERSION_IGNORED,
    )
}
