"""A cooperative scheduler that lets exactly one simulated process run at a time.

Every simulated process (a function invocation, a cleanup pass) is an asyncio task whose
storage calls pass through ``Scheduler.gate`` (hooked into ``Instrumentation.on_operation``).
At the gate the task parks itself and tells the scheduler it is idle; the simulation then
decides which parked task's operation happens next. Because only the released task runs until
its next gate, the order of storage operations is exactly the order of the decisions, whatever
the backend does underneath (in-memory calls or real requests to Azurite), so a sequence of
decisions replays exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shared.errors import BusError
from shared.stores.instrumented import Operation, SimulatedCrash

REAL_STORE_TIMEOUT = 120.0
"""For real stores: how long one step may take before the simulation declares a process hung
(a step that awaits something other than storage would otherwise stall the run forever). On
in-memory stores a step never waits, so no timer is needed there."""

_current: contextvars.ContextVar[Process | None] = contextvars.ContextVar(
    "simulated_process", default=None
)


@dataclass
class Process:
    number: int
    name: str
    started_at: float
    pending: Operation | None = None
    """The storage operation this process waits to perform, once released."""
    operations: int = 0
    """How many operations it has performed (its local clock for fault points)."""
    done: bool = False
    stalled: bool = False
    """Frozen by the simulation (a paused machine): not scheduled until it is resumed."""
    outcome: str = ""
    _release: asyncio.Future[None] | None = None
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def runnable(self) -> bool:
        return not self.done and not self.stalled and self.pending is not None


class SimulationHung(BusError):
    """A simulated process neither reached a storage operation nor finished."""


class ConcurrentOperations(BaseException):
    """A simulated process reached a second storage operation while one was pending. A
    BaseException, like ``SimulatedCrash``, so no handler in the code under test swallows it;
    the process ends and the run reports it as an unexpected error."""


class Scheduler:
    def __init__(self, idle_timeout: float | None = None) -> None:
        self.processes: list[Process] = []
        self.idle_timeout = idle_timeout
        self._idle: asyncio.Future[None] | None = None

    @staticmethod
    def current() -> Process | None:
        return _current.get()

    async def gate(self, operation: Operation) -> None:
        """Park the calling process until the simulation releases it. Calls made outside a
        simulated process (setup, checks) pass straight through."""
        process = _current.get()
        if process is None:
            return
        if process._release is not None and not process._release.done():
            # Two tasks of one process (a TaskGroup, gather) at storage at once: each would need
            # its own decision, and one pending operation per process cannot give it. End the
            # process loudly (a reported error) rather than lose track of the parked one: that
            # one is cancelled too, so the process is not taken as waiting until it has ended.
            message = (
                f"{process.name} started {operation.kind} {operation.target} while "
                f"{process.pending} was pending: the scheduler runs one operation of a "
                "process at a time"
            )
            process._release.cancel()
            raise ConcurrentOperations(message)
        process.pending = operation
        release = process._release = asyncio.get_running_loop().create_future()
        self._signal_idle()
        try:
            await release
        except asyncio.CancelledError:
            # Cancelled while parked (a sibling task failed and its TaskGroup cancelled the
            # rest): the operation never happened, and the process runs on to handle the
            # cancellation, so it no longer waits here.
            if process._release is release:
                process.pending = None
                process._release = None
            raise
        process.pending = None
        process.operations += 1

    async def spawn(self, name: str, body: Callable[[], Awaitable[str]], now: float) -> Process:
        """Start a process and let it run up to its first storage operation."""
        process = Process(len(self.processes), name, now)
        self.processes.append(process)

        async def main() -> None:
            _current.set(process)
            try:
                process.outcome = await body()
            except SimulatedCrash:
                process.outcome = "crashed"
            except ConcurrentOperations as e:
                process.outcome = f"raised {type(e).__name__}: {e}"
            except BusError as e:
                # A storage error the process did not handle: it ends, as a function would.
                process.outcome = f"failed: {type(e).__name__}"
            except Exception as e:
                # Anything else is a bug in the code under test; the run reports it.
                process.outcome = f"raised {type(e).__name__}: {e}"
            finally:
                process.done = True
                self._signal_idle()

        def start() -> None:
            process._task = asyncio.create_task(main())

        await self._run_until_idle(start, process)
        return process

    async def step(self, process: Process) -> None:
        """Let ``process`` perform its pending operation and run on to its next one."""
        release = process._release
        if release is None or release.done() or process.done:
            raise RuntimeError(f"process {process.name} is not waiting at an operation")
        if self.idle_timeout is not None:
            await self._run_until_idle(lambda: release.set_result(None), process)
            return
        # In-memory stores: the _run_until_idle of every step, without its timer and calls.
        loop = release.get_loop()
        idle = self._idle = loop.create_future()
        release.set_result(None)
        await idle
        while not self._settled(process):
            idle = self._idle = loop.create_future()
            await idle

    def live(self) -> list[Process]:
        return [p for p in self.processes if not p.done]

    async def _run_until_idle(self, start: Callable[[], None], process: Process) -> None:
        """Run ``start`` and then the loop until ``process`` is settled (``_settled``)."""
        loop = asyncio.get_running_loop()
        idle = self._idle = loop.create_future()
        start()
        while True:
            if self.idle_timeout is None:
                await idle
            else:
                try:
                    await asyncio.wait_for(asyncio.shield(idle), self.idle_timeout)
                except TimeoutError:
                    raise SimulationHung(
                        f"a simulated process ran for {self.idle_timeout}s without reaching a "
                        "storage operation"
                    ) from None
            if self._settled(process):
                return
            idle = self._idle = loop.create_future()

    @staticmethod
    def _settled(process: Process) -> bool:
        """Whether ``process`` has stopped running: it has ended, or it is parked at an
        operation that is still to be decided. An idle signal alone does not say so: a task
        that parked at a gate may be cancelled right after (its TaskGroup aborting when a
        sibling crashed), and the process then runs on until it parks again or ends, each of
        which signals again."""
        return process.done or (process._release is not None and not process._release.done())

    def _signal_idle(self) -> None:
        if self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def close(self) -> None:
        """Cancel processes still parked (a run abandoned after a violation)."""
        for process in self.processes:
            if process._task is not None and not process._task.done():
                process._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await process._task
