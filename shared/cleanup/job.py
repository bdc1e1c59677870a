"""One cleanup run: every task, resumable, within a time budget, alongside other instances.

The timer function and the operator CLI both call ``run_cleanup``. A run takes every task's
lease and works on all of them side by side, each through its pages, saving the continuation
after each page, until each task reaches its end or the budget is spent. Sharing one limit
on the records judged at once gives every task a share of every run, so a backlog in one
never starves the others. The next run, on this instance or any other, resumes each task
where it stopped; a heartbeat keeps the leases alive meanwhile (``shared.cleanup.heartbeat``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.bus.app import BusApp
from shared.bus.config import BusConfig
from shared.bus.state.rows import EndpointRows
from shared.cleanup.base import CleanupContext, CleanupTask
from shared.cleanup.batching import STORAGE_ERRORS
from shared.cleanup.checkpoint import Checkpoint, Checkpoints, LeaseLost
from shared.cleanup.heartbeat import Heartbeat, HeldLease
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import standard_tasks
from shared.clock import to_datetime
from shared.errors import BusError, ConfigurationError
from shared.stores.account import StorageAccount

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

PAGE_ATTEMPTS = 3


def endpoint_modes(app: BusApp) -> dict[str, str]:
    """The ``endpoints`` argument of ``run_cleanup`` for an application."""
    return {endpoint.name: endpoint.mode for endpoint in app.endpoints.values()}


def session_endpoints(app: BusApp) -> list[str]:
    """The ``sessions`` argument of ``run_cleanup``: the endpoints that take sessions."""
    return [endpoint.name for endpoint in app.endpoints.values() if endpoint.sessions]


def saga_endpoints(app: BusApp) -> list[str]:
    """The ``sagas`` argument of ``run_cleanup``: the app's sagas."""
    return [endpoint.name for endpoint in app.endpoints.values() if endpoint.saga is not None]


async def run_cleanup(
    account: StorageAccount,
    endpoints: Mapping[str, str] | Collection[str],
    *,
    rows: Mapping[str, EndpointRows],
    config: BusConfig | None = None,
    settings: CleanupSettings | None = None,
    tasks: Sequence[CleanupTask] | None = None,
    owner: str | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    progress: Progress | None = None,
    wait: bool = False,
    sessions: Collection[str] = (),
    sagas: Collection[str] = (),
) -> CleanupReport:
    """Run every cleanup task once (or until the budget is spent) and report what happened.

    ``endpoints`` maps each endpoint to its mode (``{e.name: e.mode}`` of a BusApp); bare
    names are taken as token mode; ``sessions`` names those that take transactional sessions
    (``session_endpoints``), ``sagas`` the sagas (``saga_endpoints``). ``rows`` holds each
    endpoint's rows, in whichever store keeps them, chosen by the caller
    (``Worker.endpoint_rows``): the tasks reach them only there. The ingress table, the
    tokens and the checkpoints are in ``account``.

    The tasks run side by side, sharing one limit on the records judged at once, so each gets
    a share of the budget in every run. Every task runs at least one page per call, so even a
    zero budget makes progress. With ``wait``, a task leased by another live instance is
    taken once that lease is released or runs out, as long as the budget lasts.
    """
    missing = sorted(set(endpoints) - set(rows))
    if missing:
        raise ConfigurationError(f"cleanup: no rows given for endpoints {missing}")
    looked_after = {name: rows[name] for name in sorted(endpoints)}
    config = config or BusConfig()
    settings = settings or CleanupSettings()
    owner = owner or f"cleanup-{uuid.uuid4().hex[:12]}"
    chosen = (
        list(tasks)
        if tasks is not None
        else standard_tasks(endpoints, config.performer_endpoint, sessions, sagas)
    )
    started = monotonic()
    report = CleanupReport(
        owner=owner,
        started_at=to_datetime(config.clock()).isoformat(),
        budget_seconds=settings.budget_seconds,
    )
    checkpoint_table = account.table(settings.checkpoint_table)
    await checkpoint_table.create_if_missing()
    checkpoints = Checkpoints(checkpoint_table, settings.lease_seconds)

    def now() -> datetime:
        return to_datetime(config.clock())

    limit = asyncio.Semaphore(settings.concurrency)
    pass_ = _Pass(
        checkpoints=checkpoints,
        owner=owner,
        over_budget=lambda: monotonic() - started >= settings.budget_seconds,
        now=now,
        context=lambda: CleanupContext(account, config, settings, looked_after, now(), limit),
        progress=progress,
        wait=wait,
        poll_seconds=min(2.0, settings.lease_seconds / 10),
    )
    report.tasks = [TaskReport(task.id) for task in chosen]
    async with Heartbeat(checkpoints, now).running() as heartbeat:
        await asyncio.gather(
            *(pass_.run(task, r, heartbeat) for task, r in zip(chosen, report.tasks, strict=True))
        )
    report.elapsed_seconds = monotonic() - started
    log.debug("cleanup report %s", json.dumps(report.to_dict()))  # the summary: at info
    return report


@dataclass(frozen=True)
class _Pass:
    checkpoints: Checkpoints
    owner: str
    over_budget: Callable[[], bool]
    now: Callable[[], datetime]
    context: Callable[[], CleanupContext]
    progress: Progress | None
    wait: bool
    poll_seconds: float

    async def run(self, task: CleanupTask, report: TaskReport, heartbeat: Heartbeat) -> None:
        try:
            checkpoint = await self._acquire(task, report)
            if checkpoint is not None:
                await self._work(task, heartbeat.hold(checkpoint), report)
        except LeaseLost:
            report.skipped = "lease lost to another instance"
        except BusError as e:
            # One failing table must not stop the others; the lease runs out and the next run
            # resumes this task from its last checkpoint.
            log.exception("cleanup task %s failed", task.id)
            report.skipped = f"error: {e}"
        except Exception as e:
            # A defect met on one task's page must not end the run either: report it, let the
            # lease run out, and leave the others to run.
            log.exception("cleanup task %s failed unexpectedly", task.id)
            report.skipped = f"error: {type(e).__name__}: {e}"

    async def _acquire(self, task: CleanupTask, report: TaskReport) -> Checkpoint | None:
        while True:
            checkpoint = await self.checkpoints.acquire(task.id, self.owner, self.now())
            if checkpoint is not None:
                return checkpoint
            holder = await self.checkpoints.status(task.id)
            if holder is not None and holder.lease_until is not None:
                report.leased_by = f"{holder.owner} until {holder.lease_until.isoformat()}"
            if not self.wait or self.over_budget():
                report.skipped = "leased by another instance"
                return None
            await asyncio.sleep(self.poll_seconds)

    async def _page(
        self, task: CleanupTask, continuation: str | None, report: TaskReport
    ) -> str | None:
        """One page, tried again when a page-level request (the listing, the query) fails
        or times out: judging a page twice is harmless, and one slow answer from a busy store
        should not end the task's share of the run."""
        attempt = 1
        while True:
            try:
                return await task.run_page(self.context(), continuation, report)
            except STORAGE_ERRORS as e:
                if attempt == PAGE_ATTEMPTS or self.over_budget():
                    raise
                log.warning("cleanup task %s: page failed (%s); trying it again", task.id, e)
            await asyncio.sleep(attempt)
            attempt += 1

    async def _work(self, task: CleanupTask, lease: HeldLease, report: TaskReport) -> None:
        """Pages from the checkpoint to the end. A task resumed in the middle (an instance
        died, or a budget ran out) goes on from the start once it reaches the end, so that a
        pass that finishes a task has looked at every record since it began."""
        continuation = lease.checkpoint.continuation
        report.resumed = continuation is not None
        from_start = continuation is None
        while True:
            continuation = await self._page(task, continuation, report)
            report.pages += 1
            if self.progress is not None:
                self.progress(
                    f"{task.id}: page {report.pages}, removed {sum(report.removed.values())}, "
                    f"kept {sum(report.kept.values())}"
                )
            if continuation is None and (from_start or self.over_budget()):
                await lease.release(None, self.now())
                report.finished = True
                return
            if continuation is None:
                from_start = True  # resumed mid-way: once more from the start
            elif self.over_budget():
                await lease.release(continuation, self.now())
                report.skipped = "budget spent"
                return
            await lease.advance(continuation, self.now())
