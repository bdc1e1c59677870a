"""Per-task leases and resumable continuations in the cleanup table.

Each cleanup task (one kind of record in one table) has a row ``("task", <task id>)`` holding
who works on it until when, where it stopped, and when it last finished. Instances take a task
by compare-and-swap on the row's ETag, so many timer instances can run at once: each task has
one worker at a time, and a crashed worker's task is picked up from its last checkpoint once
the lease runs out.

The lease is for efficiency, not safety: if it lapses while its holder is still busy, two
instances may work on one page, and that is harmless because every deletion the cleanup makes
is individually safe and ETag-guarded. The slow holder notices at its next checkpoint
(LeaseLost) and stops. A checkpoint write that timed out is not taken for a lost lease: the
row is read again and, while it still names this instance, written over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.errors import AlreadyExists, BusError, NotFound, OutcomeUnknown, PreconditionFailed
from shared.stores.table import Entity, Table

TASK_PARTITION = "task"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class LeaseLost(BusError):
    """Another instance took the task over; stop working on it."""


@dataclass(frozen=True)
class Checkpoint:
    task: str
    owner: str
    continuation: str | None
    last_completed_at: datetime | None
    etag: str
    lease_until: datetime | None = None

    def held_by_other(self, owner: str, now: datetime) -> bool:
        """Another instance holds a lease on the task that has not run out."""
        live = self.lease_until is not None and self.lease_until > now
        return live and self.owner != owner


class Checkpoints:
    def __init__(self, table: Table, lease_seconds: float) -> None:
        self.table = table
        self.lease = timedelta(seconds=lease_seconds)

    async def status(self, task: str) -> Checkpoint | None:
        try:
            entity = await self.table.get(TASK_PARTITION, task)
        except NotFound:
            return None
        return _checkpoint(entity)

    async def acquire(self, task: str, owner: str, now: datetime) -> Checkpoint | None:
        """Take the task's lease, or return None if another live instance holds it."""
        try:
            entity: Entity | None = await self.table.get(TASK_PARTITION, task)
        except NotFound:
            entity = None
        if entity is None:
            fresh = _entity(task, owner, now + self.lease, None, None)
            try:
                etag = await self.table.insert(fresh)
            except AlreadyExists:
                return None  # another instance created it just now and holds it
            return Checkpoint(task, owner, None, None, etag, now + self.lease)
        current = _checkpoint(entity)
        if current.held_by_other(owner, now):
            return None
        updated = _entity(
            task, owner, now + self.lease, current.continuation, current.last_completed_at
        )
        try:
            etag = await self.table.update(updated, etag=entity.etag)
        except (PreconditionFailed, NotFound):
            return None
        return Checkpoint(
            task, owner, current.continuation, current.last_completed_at, etag, now + self.lease
        )

    async def advance(
        self, checkpoint: Checkpoint, continuation: str | None, now: datetime
    ) -> Checkpoint:
        """Save progress and renew the lease; LeaseLost if someone else took the task."""
        return await self._write(
            checkpoint, continuation, checkpoint.last_completed_at, now + self.lease
        )

    async def release(
        self, checkpoint: Checkpoint, continuation: str | None, now: datetime
    ) -> Checkpoint:
        """Let the lease go; ``continuation=None`` records that the task finished a pass."""
        completed = now if continuation is None else checkpoint.last_completed_at
        return await self._write(checkpoint, continuation, completed, now)

    async def _write(
        self,
        checkpoint: Checkpoint,
        continuation: str | None,
        completed: datetime | None,
        lease_until: datetime,
    ) -> Checkpoint:
        entity = _entity(checkpoint.task, checkpoint.owner, lease_until, continuation, completed)
        try:
            etag = await self.table.update(entity, etag=checkpoint.etag)
        except (PreconditionFailed, NotFound, OutcomeUnknown):
            etag = await self._write_again(checkpoint, entity)
        return Checkpoint(
            checkpoint.task, checkpoint.owner, continuation, completed, etag, lease_until
        )

    async def _write_again(self, checkpoint: Checkpoint, entity: Entity) -> str:
        """The write failed or its answer was lost. On a busy store a write that timed out
        may still have landed, and then the row's ETag is no longer the one we hold although
        the lease is still ours: read the row, and while it names this owner, write over it.
        A row that names another owner was taken over."""
        try:
            current = await self.table.get(TASK_PARTITION, checkpoint.task)
        except NotFound:
            raise LeaseLost(f"cleanup task {checkpoint.task} was taken over") from None
        if _checkpoint(current).owner != checkpoint.owner:
            raise LeaseLost(f"cleanup task {checkpoint.task} was taken over")
        try:
            return await self.table.update(entity, etag=current.etag)
        except (PreconditionFailed, NotFound):
            raise LeaseLost(f"cleanup task {checkpoint.task} was taken over") from None


def _entity(
    task: str,
    owner: str,
    lease_until: datetime,
    continuation: str | None,
    completed: datetime | None,
) -> Entity:
    return Entity(
        TASK_PARTITION,
        task,
        {
            "owner": owner,
            "lease_until": lease_until,
            "continuation": continuation or "",
            "last_completed_at": completed or EPOCH,
        },
    )


def _checkpoint(entity: Entity) -> Checkpoint:
    p = entity.properties
    completed = p.get("last_completed_at")
    lease_until = p.get("lease_until")
    return Checkpoint(
        task=entity.row_key,
        owner=str(p.get("owner", "")),
        continuation=str(p.get("continuation") or "") or None,
        last_completed_at=(
            completed if isinstance(completed, datetime) and completed > EPOCH else None
        ),
        etag=entity.etag,
        lease_until=lease_until if isinstance(lease_until, datetime) else None,
    )
