"""The work of one Spark task: send its partition's rows through the ingress, a bounded
number at a time, and say what became of each.

Everything a task needs travels in ``SendTask`` (pickled with the function): executors read
no settings file and no environment of the driver. A storage error that outlasts the SDK's
retries fails the task (Spark retries it, and a retry re-sends nothing already sent); a row
that fails a check is rejected and the task goes on.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from shared.app_loader import load_app
from shared.bulk.inputs import CORRUPT_COLUMN
from shared.bulk.outcomes import Outcome, Status
from shared.bulk.rows import Planned, Rejected, Target, plan_row, row_json, safe_text
from shared.bus import Bus, BusApp, BusConfig
from shared.bus.ingress import IngressClient, SendReceipt
from shared.errors import ConflictRetriesExhausted, IdempotencyKeyReused, OutcomeUnknown
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import InstrumentedAccount

SENDER = "bulk"
"""The ingress sender of bulk jobs (token names and ingress records say it)."""


def job_scope(job: str) -> str:
    """Whose idempotency keys a job's rows are (``shared.bus.ingress``): the job's own, so no
    other sender's key (an HTTP caller's ``JOB:KEY`` included) answers for one of its rows."""
    return f"{SENDER}:{job}"


ROW_ATTEMPTS = 4
RETRY_SECONDS = 1.0
"""The first wait before a row's send is tried again; it doubles each time (with jitter)."""
DUPLICATE_COUNT_COLUMN = "__bulk_rows_with_key"
"""Added by the driver: how many input rows share this row's key."""


class RequestCounter(Protocol):
    """Where a task adds the storage requests it made (a Spark accumulator)."""

    def add(self, term: int) -> None: ...


@dataclass(frozen=True)
class SendTask:
    storage: StorageSettings
    app_reference: str
    job: str
    target: Target
    key_column: str
    body_columns: tuple[str, ...]
    concurrency: int
    bus_fields: dict[str, Any]
    """The bus's container and table names and the app settings a send obeys (ingress window,
    payload limit, conflict rounds), from the driver's configuration (``bus_fields``): an
    executor reads no settings of its own."""


def bus_fields(config: BusConfig) -> dict[str, Any]:
    """What a task needs of the bus's configuration to send as the driver would."""
    return {
        "tokens_container": config.tokens_container,
        "topics_container": config.topics_container,
        "ingress_table": config.ingress_table,
        "parked_container": config.parked_container,
        "ingress_window_seconds": config.ingress_window_seconds,
        "ingress_key_scopes": config.ingress_key_scopes,
        "max_payload_bytes": config.max_payload_bytes,
        "max_conflict_rounds": config.max_conflict_rounds,
    }


def send_partition(
    task: SendTask, requests: RequestCounter, rows: Iterable[Any]
) -> Iterator[Outcome]:
    """Runs inside a Spark task (``mapPartitions``): the outcome of every row, in order."""
    batch = [row.asDict(recursive=True) for row in rows]
    outcomes, made = asyncio.run(_send_all(task, batch))
    requests.add(made)
    return iter(outcomes)


async def _send_all(task: SendTask, rows: list[dict[str, Any]]) -> tuple[list[Outcome], int]:
    app = load_app(task.app_reference)
    config = BusConfig(**task.bus_fields)
    async with AzureStorageAccount(task.storage) as raw:
        account = InstrumentedAccount(raw)
        client = Bus(app, account, config).client(SENDER, scope=job_scope(task.job))
        outcomes: list[Outcome | None] = [None] * len(rows)
        pending = iter(enumerate(rows))

        async def sender() -> None:
            for index, row in pending:  # shared: each row is taken by one sender only
                outcomes[index] = await _send_row(app, task, client, row)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(task.concurrency, len(rows))):
                group.create_task(sender())
        return [o for o in outcomes if o is not None], account.instrumentation.count


async def _send_row(
    app: BusApp, task: SendTask, client: IngressClient, row: dict[str, Any]
) -> Outcome:
    shared_by = int(row.pop(DUPLICATE_COUNT_COLUMN, 1) or 1)
    unreadable = row.pop(CORRUPT_COLUMN, None)
    if unreadable is not None:
        reason = "the input line could not be parsed"
        return (None, None, "rejected", reason, [], safe_text(str(unreadable))[:10_000])
    planned = plan_row(
        app,
        client.config,
        task.target,
        task.job,
        row,
        key_column=task.key_column,
        body_columns=task.body_columns,
    )
    if isinstance(planned, Planned) and shared_by > 1:
        # Which of them would be sent is up to the partitioning: none is, all are rejected.
        reason = f"{shared_by} rows of the input have this key; one key, one message"
        planned = Rejected(planned.row_key, reason, row_json(row))
    if isinstance(planned, Rejected):
        return (planned.row_key, None, "rejected", planned.reason, [], planned.row)
    try:
        receipt = await _submit_with_retries(client, planned)
    except IdempotencyKeyReused as e:
        return (planned.row_key, planned.key, "rejected", str(e), [], row_json(row))
    status: Status = "deduplicated" if receipt.deduplicated else "sent"
    return (planned.row_key, planned.key, status, None, list(receipt.message_ids), None)


async def _submit_with_retries(client: IngressClient, planned: Planned) -> SendReceipt:
    """The ingress send of one row, tried again with the same key when storage did not
    answer in time or kept conflicting: a busy account then slows the task rather than fail
    it (and make Spark redo its whole partition). What still fails fails the task."""
    for attempt in range(ROW_ATTEMPTS - 1):
        try:
            return await _submit(client, planned)
        except (OutcomeUnknown, ConflictRetriesExhausted):
            await asyncio.sleep(RETRY_SECONDS * 2**attempt * random.uniform(0.5, 1.5))
    return await _submit(client, planned)


async def _submit(client: IngressClient, planned: Planned) -> SendReceipt:
    sent = planned.sent
    return await client.submit(
        sent.message, to=sent.to, idempotency_key=planned.key, request=sent.request
    )
