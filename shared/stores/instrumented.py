"""A wrapper around any StorageAccount that counts operations and injects faults.

Every store call is one numbered operation. A fault plan may, at any operation:
- ``CRASH_BEFORE``: the process dies before the request leaves (nothing applied);
- ``CRASH_AFTER``: the request is applied, then the process dies (response lost);
- ``ERROR_BEFORE``: the call fails with OutcomeUnknown without being applied (timeout);
- ``ERROR_AFTER``: the call is applied but fails with OutcomeUnknown (response lost);
- ``LATE``: the call fails with OutcomeUnknown and is not applied yet; the request is held in
  ``Instrumentation.held`` and applied whenever its holder lands it (a request delayed in the
  network that reaches the service after the caller gave up on it).
A crash is ``SimulatedCrash``, a BaseException, so no ``except Exception`` in the code under
test can swallow it: like a real crash, nothing after it in that invocation runs.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from shared.errors import OutcomeUnknown, StorageError
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob, BlobContainer, BlobPage, BlobProperties
from shared.stores.queue import MessageQueue, QueueMessage
from shared.stores.table import Entity, Page, Table, TableOperation

T = TypeVar("T")


class Fault(enum.Enum):
    CRASH_BEFORE = "crash-before"
    CRASH_AFTER = "crash-after"
    ERROR_BEFORE = "error-before"
    ERROR_AFTER = "error-after"
    LATE = "late"


class SimulatedCrash(BaseException):
    """The process running the pipeline died at this point."""


@dataclass(frozen=True)
class Operation:
    index: int
    kind: str
    """e.g. 'blob.create', 'table.transact', 'queue.send'."""
    target: str
    """The container, table or queue name (and the item where there is one)."""


FaultPlan = Callable[[Operation], Fault | None]


@dataclass
class HeldRequest:
    """A request given the ``LATE`` fault: its caller saw OutcomeUnknown, the service has not
    applied it yet. ``land`` applies it; a late request that no longer applies (its ETag or
    uniqueness condition fails now) changes nothing, as on the real service."""

    operation: Operation
    call: Callable[[], Awaitable[object]]
    landed: bool = False

    async def land(self) -> bool:
        """Apply the request; returns whether the store accepted it."""
        if self.landed:
            raise RuntimeError(f"request {self.operation} has already landed")
        self.landed = True
        try:
            await self.call()
        except StorageError:
            return False
        return True


def no_faults(operation: Operation) -> Fault | None:
    return None


def fault_at(index: int, fault: Fault) -> FaultPlan:
    """Inject ``fault`` at operation number ``index`` (counted from 0)."""
    return lambda op: fault if op.index == index else None


def fault_at_first(kind: str, fault: Fault) -> FaultPlan:
    """Inject ``fault`` at the first operation of ``kind`` (e.g. 'blob.create'), wherever
    it falls in the sequence."""
    hit: list[int] = []

    def plan(op: Operation) -> Fault | None:
        if op.kind != kind or (hit and hit[0] != op.index):
            return None
        hit.append(op.index)
        return fault

    return plan


@dataclass
class Instrumentation:
    """Shared by every store handle of one instrumented account."""

    plan: FaultPlan = no_faults
    operations: list[Operation] = field(default_factory=list)
    injected: list[tuple[Operation, Fault]] = field(default_factory=list)
    on_operation: Callable[[Operation], Awaitable[None]] | None = None
    """Called before every operation; the simulator's scheduler yields control here."""
    held: list[HeldRequest] = field(default_factory=list)
    """Requests given the ``LATE`` fault, in the order they were sent."""

    @property
    def count(self) -> int:
        return len(self.operations)

    def kinds_since(self, mark: int) -> Counter[str]:
        return Counter(op.kind for op in self.operations[mark:])

    async def run(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        operation = Operation(len(self.operations), kind, target)
        self.operations.append(operation)
        if self.on_operation is not None:
            await self.on_operation(operation)
        fault = self.plan(operation)
        if fault is not None:
            self.injected.append((operation, fault))
        if fault is Fault.CRASH_BEFORE:
            raise SimulatedCrash(f"crash before {kind} {target}")
        if fault is Fault.ERROR_BEFORE:
            raise OutcomeUnknown(f"injected: {kind} {target} timed out before it was applied")
        if fault is Fault.LATE:
            self.held.append(HeldRequest(operation, call))
            raise OutcomeUnknown(f"injected: {kind} {target} timed out; it may still land")
        result = await call()
        if fault is Fault.CRASH_AFTER:
            raise SimulatedCrash(f"crash after {kind} {target}")
        if fault is Fault.ERROR_AFTER:
            raise OutcomeUnknown(f"injected: {kind} {target} applied but its response was lost")
        return result


class InstrumentedAccount(StorageAccount):
    def __init__(self, inner: StorageAccount, instrumentation: Instrumentation | None = None):
        self.inner = inner
        self.instrumentation = instrumentation or Instrumentation()

    def blob_container(self, name: str) -> BlobContainer:
        return _Blobs(self.inner.blob_container(name), self.instrumentation)

    def table(self, name: str) -> Table:
        return _Table(self.inner.table(name), self.instrumentation)

    def queue(self, name: str) -> MessageQueue:
        return _Queue(self.inner.queue(name), self.instrumentation)

    async def close(self) -> None:
        await self.inner.close()


class _Blobs(BlobContainer):
    def __init__(self, inner: BlobContainer, instrumentation: Instrumentation) -> None:
        self._inner = inner
        self._i = instrumentation
        self.name = inner.name

    def _t(self, blob: str) -> str:
        return f"{self.name}/{blob}"

    async def create_if_missing(self) -> None:
        await self._inner.create_if_missing()

    async def delete_container(self) -> None:
        await self._inner.delete_container()

    async def create(
        self, name: str, data: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        return await self._i.run(
            "blob.create", self._t(name), lambda: self._inner.create(name, data, metadata)
        )

    async def read(self, name: str) -> Blob:
        return await self._i.run("blob.read", self._t(name), lambda: self._inner.read(name))

    async def get_properties(self, name: str) -> BlobProperties:
        return await self._i.run(
            "blob.get_properties", self._t(name), lambda: self._inner.get_properties(name)
        )

    async def upload(
        self,
        name: str,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
    ) -> str:
        return await self._i.run(
            "blob.upload",
            self._t(name),
            lambda: self._inner.upload(name, data, metadata, etag=etag),
        )

    async def set_metadata(
        self, name: str, metadata: Mapping[str, str], *, etag: str | None = None
    ) -> str:
        return await self._i.run(
            "blob.set_metadata",
            self._t(name),
            lambda: self._inner.set_metadata(name, metadata, etag=etag),
        )

    async def delete(self, name: str, *, etag: str | None = None) -> None:
        await self._i.run("blob.delete", self._t(name), lambda: self._inner.delete(name, etag=etag))

    async def list(self, prefix: str = "") -> AsyncIterator[BlobProperties]:
        async def collect() -> list[BlobProperties]:
            return [p async for p in self._inner.list(prefix)]

        for item in await self._i.run("blob.list", self._t(prefix), collect):
            yield item

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        return await self._i.run(
            "blob.list",
            self._t(prefix),
            lambda: self._inner.list_page(prefix, page_size=page_size, continuation=continuation),
        )


class _Table(Table):
    def __init__(self, inner: Table, instrumentation: Instrumentation) -> None:
        self._inner = inner
        self._i = instrumentation
        self.name = inner.name

    async def create_if_missing(self) -> None:
        await self._inner.create_if_missing()

    async def delete_table(self) -> None:
        await self._inner.delete_table()

    async def get(self, partition_key: str, row_key: str) -> Entity:
        return await self._i.run(
            "table.get",
            f"{self.name}/{partition_key}/{row_key}",
            lambda: self._inner.get(partition_key, row_key),
        )

    async def query(
        self,
        *,
        partition_key: str | None = None,
        row_key_prefix: str | None = None,
        row_keys: Sequence[str] | None = None,
        page_size: int = 1000,
        continuation: str | None = None,
    ) -> Page:
        return await self._i.run(
            "table.query",
            f"{self.name}/{partition_key or '*'}",
            lambda: self._inner.query(
                partition_key=partition_key,
                row_key_prefix=row_key_prefix,
                row_keys=row_keys,
                page_size=page_size,
                continuation=continuation,
            ),
        )

    async def insert(self, entity: Entity) -> str:
        return await self._i.run(
            "table.insert", self._target(entity), lambda: self._inner.insert(entity)
        )

    async def update(self, entity: Entity, *, etag: str | None = None) -> str:
        return await self._i.run(
            "table.update", self._target(entity), lambda: self._inner.update(entity, etag=etag)
        )

    async def upsert(self, entity: Entity) -> str:
        return await self._i.run(
            "table.upsert", self._target(entity), lambda: self._inner.upsert(entity)
        )

    async def delete(self, partition_key: str, row_key: str, *, etag: str | None = None) -> None:
        await self._i.run(
            "table.delete",
            f"{self.name}/{partition_key}/{row_key}",
            lambda: self._inner.delete(partition_key, row_key, etag=etag),
        )

    async def transact(self, operations: Sequence[TableOperation]) -> list[str | None]:
        return await self._i.run(
            "table.transact", self.name, lambda: self._inner.transact(operations)
        )

    def _target(self, entity: Entity) -> str:
        return f"{self.name}/{entity.partition_key}/{entity.row_key}"


class _Queue(MessageQueue):
    def __init__(self, inner: MessageQueue, instrumentation: Instrumentation) -> None:
        self._inner = inner
        self._i = instrumentation
        self.name = inner.name

    async def create_if_missing(self) -> None:
        await self._inner.create_if_missing()

    async def delete_queue(self) -> None:
        await self._inner.delete_queue()

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        return await self._i.run(
            "queue.send",
            self.name,
            lambda: self._inner.send(
                content, visibility_delay=visibility_delay, time_to_live=time_to_live
            ),
        )

    async def receive(
        self, max_messages: int = 1, *, visibility_timeout: float = 30.0
    ) -> list[QueueMessage]:
        return await self._i.run(
            "queue.receive",
            self.name,
            lambda: self._inner.receive(max_messages, visibility_timeout=visibility_timeout),
        )

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        await self._i.run(
            "queue.delete", self.name, lambda: self._inner.delete(message_id, pop_receipt)
        )

    async def update(
        self,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_timeout: float,
        content: str | None = None,
    ) -> str:
        return await self._i.run(
            "queue.update",
            self.name,
            lambda: self._inner.update(
                message_id, pop_receipt, visibility_timeout=visibility_timeout, content=content
            ),
        )

    async def peek(self, max_messages: int = 32) -> list[QueueMessage]:
        return await self._i.run("queue.peek", self.name, lambda: self._inner.peek(max_messages))

    async def approximate_count(self) -> int:
        return await self._i.run("queue.count", self.name, self._inner.approximate_count)

    async def clear(self) -> None:
        await self._inner.clear()
