"""A one-endpoint cleanup pass without leases or checkpoints, for tests and simulations.

It runs the same tasks as the cleanup job (``shared.cleanup.job``) — the endpoint's abandoned
tokens, then its outbox records — to the end, in the calling task, so a simulation can
interleave it with processing at any point. Production code calls ``run_cleanup``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.bus.config import BusConfig
from shared.bus.state.rows import EndpointRows
from shared.cleanup.abandoned_tokens import AbandonedTokens
from shared.cleanup.base import CleanupContext, CleanupTask
from shared.cleanup.outbox_records import OutboxRecords
from shared.cleanup.report import TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.clock import Clock, system_clock, to_datetime
from shared.stores.account import StorageAccount

DEFAULT_GRACE_SECONDS = CleanupSettings().grace_seconds


@dataclass
class SweepReport:
    outbox_records_removed: int = 0
    abandoned_tokens_removed: int = 0
    outbox_records_kept: int = 0
    tasks: list[TaskReport] = field(default_factory=list)


async def sweep_endpoint(
    account: StorageAccount,
    endpoint: str,
    rows: EndpointRows,
    *,
    tokens_container: str = "tokens",
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    clock: Clock = system_clock,
    ingress_table: str = "ingress",
) -> SweepReport:
    """``rows``: the endpoint's rows, in whichever store keeps them (the caller chooses:
    ``shared.bus.state.stores.endpoint_rows``); the tokens are in ``account``."""
    context = CleanupContext(
        account,
        BusConfig(tokens_container=tokens_container, ingress_table=ingress_table, clock=clock),
        CleanupSettings(grace_seconds=grace_seconds, page_size=1000),
        {endpoint: rows},
        to_datetime(clock()),
    )
    report = SweepReport()
    tasks: list[CleanupTask] = [AbandonedTokens(f"{endpoint}/"), OutboxRecords(endpoint)]
    for task in tasks:
        task_report = TaskReport(task.id)
        continuation: str | None = None
        while True:
            continuation = await task.run_page(context, continuation, task_report)
            task_report.pages += 1
            if continuation is None:
                break
        task_report.finished = True
        report.tasks.append(task_report)
        report.abandoned_tokens_removed += task_report.removed["abandoned_tokens"]
        report.outbox_records_removed += (
            task_report.removed["outbox_records"] + task_report.removed["unused_outbox_records"]
        )
        if isinstance(task, OutboxRecords):
            report.outbox_records_kept += sum(task_report.kept.values())
    return report
