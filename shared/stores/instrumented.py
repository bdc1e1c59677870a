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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from shared.errors import OutcomeUnknown, StorageError
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.delegating import (
    DelegatingAccount,
    DelegatingBlobContainer,
    DelegatingQueue,
    DelegatingTable,
)
from shared.stores.queue import MessageQueue
from shared.stores.table import Table

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


class InstrumentedAccount(DelegatingAccount):
    def __init__(self, inner: StorageAccount, instrumentation: Instrumentation | None = None):
        super().__init__(inner)
        self.instrumentation = instrumentation or Instrumentation()

    def blob_container(self, name: str) -> BlobContainer:
        return _Blobs(self.inner.blob_container(name), self.instrumentation)

    def table(self, name: str) -> Table:
        return _Table(self.inner.table(name), self.instrumentation)

    def queue(self, name: str) -> MessageQueue:
        return _Queue(self.inner.queue(name), self.instrumentation)


class _Blobs(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, instrumentation: Instrumentation) -> None:
        super().__init__(inner)
        self._i = instrumentation

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._i.run(kind, target, call)


class _Table(DelegatingTable):
    def __init__(self, inner: Table, instrumentation: Instrumentation) -> None:
        super().__init__(inner)
        self._i = instrumentation

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._i.run(kind, target, call)


class _Queue(DelegatingQueue):
    def __init__(self, inner: MessageQueue, instrumentation: Instrumentation) -> None:
        super().__init__(inner)
        self._i = instrumentation

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._i.run(kind, target, call)
