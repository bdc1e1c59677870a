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
        process.pending = operation
        release = process._release = asyncio.get_running_loop().create_future()
        self._signal_idle()
        await release
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

        await self._run_until_idle(start)
        return process

    async def step(self, process: Process) -> None:
        """Let ``process`` perform its pending operation and run on to its next one."""
        release = process._release
        if release is None or process.done:
            raise RuntimeError(f"process {process.name} is not waiting at an operation")
        if self.idle_timeout is not None:
            await self._run_until_idle(lambda: release.set_result(None))
            return
        # In-memory stores: the _run_until_idle of every step, without its timer and calls.
        idle = self._idle = release.get_loop().create_future()
        release.set_result(None)
        await idle

    def live(self) -> list[Process]:
        return [p for p in self.processes if not p.done]

    async def _run_until_idle(self, start: Callable[[], None]) -> None:
        idle = self._idle = asyncio.get_running_loop().create_future()
        start()
        if self.idle_timeout is None:
            await idle
            return
        try:
            await asyncio.wait_for(asyncio.shield(idle), self.idle_timeout)
        except TimeoutError:
            raise SimulationHung(
                f"a simulated process ran for {self.idle_timeout}s without reaching a "
                "storage operation"
            ) from None

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
