"""One cleanup run: every task, resumable, within a time budget, alongside other instances.

The timer function and the operator CLI both call ``run_cleanup``. A run takes each task's
lease in turn (tasks interrupted last time first, then the least recently finished), works
through its pages saving the continuation after each, and stops starting new pages once the
budget is spent. The next run — on this instance or any other — resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from shared.bus.app import BusApp
from shared.bus.config import BusConfig
from shared.cleanup.checkpoint import EPOCH, Checkpoint, Checkpoints, LeaseLost
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import CleanupContext, CleanupTask, standard_tasks
from shared.clock import to_datetime
from shared.errors import BusError
from shared.stores.account import StorageAccount

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def endpoint_modes(app: BusApp) -> dict[str, str]:
    """The ``endpoints`` argument of ``run_cleanup`` for an application."""
    return {endpoint.name: endpoint.mode for endpoint in app.endpoints.values()}


async def run_cleanup(
    account: StorageAccount,
    endpoints: Mapping[str, str] | Collection[str],
    *,
    config: BusConfig | None = None,
    settings: CleanupSettings | None = None,
    tasks: Sequence[CleanupTask] | None = None,
    owner: str | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    progress: Progress | None = None,
) -> CleanupReport:
    """Run every cleanup task once (or until the budget is spent) and report what happened.

    ``endpoints`` maps each endpoint to its mode (``{e.name: e.mode}`` of a BusApp); bare
    names are taken as token mode.

    At least one page of one task runs per call, so even a zero budget makes progress.
    """
    config = config or BusConfig()
    settings = settings or CleanupSettings()
    owner = owner or f"cleanup-{uuid.uuid4().hex[:12]}"
    chosen = list(tasks) if tasks is not None else standard_tasks(endpoints)
    started = monotonic()
    report = CleanupReport(
        owner=owner,
        started_at=to_datetime(config.clock()).isoformat(),
        budget_seconds=settings.budget_seconds,
    )
    checkpoint_table = account.table(settings.checkpoint_table)
    await checkpoint_table.create_if_missing()
    checkpoints = Checkpoints(checkpoint_table, settings.lease_seconds)

    def over_budget() -> bool:
        return monotonic() - started >= settings.budget_seconds

    def now() -> datetime:
        return to_datetime(config.clock())

    pages_run = 0
    for task in await _in_order(checkpoints, chosen):
        task_report = TaskReport(task.id)
        report.tasks.append(task_report)
        if pages_run and over_budget():
            task_report.skipped = "budget spent"
            continue
        checkpoint = await checkpoints.acquire(task.id, owner, now())
        if checkpoint is None:
            task_report.skipped = "leased by another instance"
            continue
        context = CleanupContext(account, config, settings, tuple(sorted(endpoints)), now())
        pages_run += await _run_task(
            task, context, checkpoints, checkpoint, task_report, over_budget, progress
        )
    report.elapsed_seconds = monotonic() - started
    log.debug("cleanup report %s", json.dumps(report.to_dict()))  # the summary: at info
    return report


async def _in_order(checkpoints: Checkpoints, tasks: list[CleanupTask]) -> list[CleanupTask]:
    keyed = []
    for index, task in enumerate(tasks):
        status = await checkpoints.status(task.id)
        interrupted = status is not None and status.continuation is not None
        finished = (status.last_completed_at if status else None) or EPOCH
        keyed.append((not interrupted, finished, index, task))
    return [task for *_, task in sorted(keyed, key=lambda k: k[:3])]


async def _run_task(
    task: CleanupTask,
    context: CleanupContext,
    checkpoints: Checkpoints,
    checkpoint: Checkpoint,
    report: TaskReport,
    over_budget: Callable[[], bool],
    progress: Progress | None,
) -> int:
    continuation = checkpoint.continuation
    pages = 0
    try:
        while True:
            continuation = await task.run_page(context, continuation, report)
            pages += 1
            report.pages += 1
            if progress is not None:
                progress(
                    f"{task.id}: page {report.pages}, removed {sum(report.removed.values())}, "
                    f"kept {sum(report.kept.values())}"
                )
            if continuation is None:
                await checkpoints.release(checkpoint, None, context.now)
                report.finished = True
                return pages
            if over_budget():
                await checkpoints.release(checkpoint, continuation, context.now)
                report.skipped = "budget spent"
                return pages
            checkpoint = await checkpoints.advance(checkpoint, continuation, context.now)
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
    return pages
