"""The one place the simulator calls the cleanup: the real tasks of ``shared.cleanup``, run to
the end in the calling process so the simulator can interleave them with processing.

Per endpoint, by its mode:
- ``token``: ``sweep_endpoint`` (the endpoint's abandoned tokens, then its O(m) records);
- a window mode: the endpoint's abandoned tokens (``AbandonedTokens``, judged by the mode's
  origin rows), then ``ModeRetention`` (``expire_processed``, ``truncate_state_streams`` or
  ``expire_entity_outboxes``), in the order of ``standard_tasks``. The job's other tasks
  have nothing to do here: a window-mode table holds no O(m), the simulated client's ingress
  records outlive every run (their window is days) and audit rows are the audit's.

Then, for every sender, the shared payloads (``SharedPayloads``), after the tokens that refer
to them. An app of a system (``SimConfig.apps``) also runs production's token task over the
whole shared container (``whole_container``), where it meets the other app's tokens, judged
with only its own endpoints' rows and ingress table (``shared.cleanup.abandoned_tokens``).
The parked phase (``lab.sim.parked``) also runs the endpoint's poison task (``PoisonQueue``:
entries that will expire re-parked, orphan parked originals removed), ``clean_parked``; the
session phase (``lab.sim.sessions``) the sessions task of its endpoint, ``clean_sessions``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from lab.cleanup.sweep import sweep_endpoint
from shared.bus.app import Mode
from shared.bus.config import BusConfig
from shared.bus.state.rows import EndpointRows
from shared.cleanup.abandoned_tokens import AbandonedTokens
from shared.cleanup.base import CleanupContext, CleanupTask
from shared.cleanup.parked import PoisonQueue
from shared.cleanup.payloads import SharedPayloads
from shared.cleanup.report import TaskReport
from shared.cleanup.retention import ModeRetention
from shared.cleanup.settings import CleanupSettings
from shared.clock import Clock, to_datetime
from shared.stores.account import StorageAccount


async def cleanup_to_completion(
    account: StorageAccount,
    endpoints: Mapping[str, Mode],
    rows: Mapping[str, EndpointRows],
    *,
    tokens_container: str,
    ingress_table: str,
    grace_seconds: float,
    window_seconds: float,
    clock: Clock,
    senders: tuple[str, ...] = (),
    payloads_container: str = "payloads",
    outbox_task: Callable[[str], CleanupTask] | None = None,
    whole_container: bool = False,
) -> None:
    """One cleanup pass over every endpoint, then over the tokens of each client ``senders``
    names (judged by their ingress records); ``window_seconds`` is the retention of every
    window mode's dedup records (its dedup window). ``rows``: each endpoint's rows, in
    whichever store and through whichever wrapper the caller chose; the tokens and the
    ingress table are in ``account``. ``outbox_task``: the O(m) task a token-mode endpoint
    runs instead of production's (a protocol explored beside it, ``lab.sim.claim_by_delete``).
    ``whole_container``: the token task over the whole container too, as the job runs it."""
    for endpoint, mode in endpoints.items():
        if mode == "token" and outbox_task is not None:
            config = BusConfig(
                tokens_container=tokens_container, ingress_table=ingress_table, clock=clock
            )
            for task in (AbandonedTokens(f"{endpoint}/"), outbox_task(endpoint)):
                await _run(task, account, {endpoint: rows[endpoint]}, grace_seconds, clock, config)
            continue
        if mode == "token":
            await sweep_endpoint(
                account,
                endpoint,
                rows[endpoint],
                tokens_container=tokens_container,
                ingress_table=ingress_table,
                grace_seconds=grace_seconds,
                clock=clock,
            )
            continue
        config = BusConfig(
            tokens_container=tokens_container,
            ingress_table=ingress_table,
            clock=clock,
            processed_retention_seconds=window_seconds,
            state_stream_retention_seconds=window_seconds,
            entity_outbox_retention_seconds=window_seconds,
        )
        context = CleanupContext(
            account,
            config,
            CleanupSettings(grace_seconds=grace_seconds, page_size=1000),
            {endpoint: rows[endpoint]},
            to_datetime(clock()),
        )
        tasks: list[CleanupTask] = [AbandonedTokens(f"{endpoint}/"), ModeRetention(endpoint, mode)]
        for task in tasks:
            report = TaskReport(task.id)
            continuation: str | None = None
            while True:
                continuation = await task.run_page(context, continuation, report)
                if continuation is None:
                    break
    everyone = BusConfig(
        tokens_container=tokens_container,
        payloads_container=payloads_container,
        ingress_table=ingress_table,
        clock=clock,
        processed_retention_seconds=window_seconds,
        state_stream_retention_seconds=window_seconds,
        entity_outbox_retention_seconds=window_seconds,
    )
    every_rows = {endpoint: rows[endpoint] for endpoint in endpoints}
    if whole_container:
        await _run(AbandonedTokens(), account, every_rows, grace_seconds, clock, everyone)
    for sender in senders:
        await _run(
            AbandonedTokens(f"{sender}/"), account, every_rows, grace_seconds, clock, everyone
        )
    await _run(SharedPayloads(), account, every_rows, grace_seconds, clock, everyone)


async def _run(
    task: CleanupTask,
    account: StorageAccount,
    endpoints: Mapping[str, EndpointRows],
    grace_seconds: float,
    clock: Clock,
    config: BusConfig,
) -> None:
    context = CleanupContext(
        account,
        config,
        CleanupSettings(grace_seconds=grace_seconds, page_size=1000),
        endpoints,
        to_datetime(clock()),
    )
    report = TaskReport(task.id)
    continuation: str | None = None
    while True:
        continuation = await task.run_page(context, continuation, report)
        if continuation is None:
            return


async def clean_parked(
    account: StorageAccount,
    endpoint: str,
    config: BusConfig,
    *,
    grace_seconds: float,
    margin_seconds: float,
    clock: Clock,
) -> None:
    """One pass of ``endpoint``'s poison task, run to the end: its poison queue, then its
    parked originals in ``config.parked_container``."""
    settings = CleanupSettings(
        grace_seconds=grace_seconds, page_size=1000, poison_expiry_margin_seconds=margin_seconds
    )
    context = CleanupContext(account, config, settings, {}, to_datetime(clock()))
    task = PoisonQueue(endpoint)
    report = TaskReport(task.id)
    continuation: str | None = None
    while True:
        continuation = await task.run_page(context, continuation, report)
        if continuation is None:
            return


async def expire_audit_rows(rows: Iterable[EndpointRows]) -> int:
    """Delete every audit row of these endpoints' rows, as the audit retention eventually
    does. Used only when a simulated process stalls for longer than any retention period
    (nothing else runs meanwhile); returns how many went."""
    removed = 0
    for endpoint in rows:
        removed += await endpoint.expire_audit(datetime.max.replace(tzinfo=UTC))
    return removed


async def clean_sessions(
    account: StorageAccount,
    task: CleanupTask,
    rows: Mapping[str, EndpointRows],
    config: BusConfig,
    *,
    grace_seconds: float,
) -> None:
    """One pass of a sessions task (``shared.cleanup.sessions.SessionRecords``, or a
    variant's), run to the end: its endpoint's unsignalled sessions signalled and its records
    retired, with the resend delay and the key's window of ``config``."""
    await _run(task, account, rows, grace_seconds, config.clock, config)
