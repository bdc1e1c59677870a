"""What every cleanup task shares: the context a pass runs in (``CleanupContext``), the task
interface (``CleanupTask``), and the judgements and reports several tasks make alike. The
tasks themselves are in their own modules and the list of them in ``shared.cleanup.tasks``;
nothing here imports a task, so a task module may import this one without a circle.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.bus.config import BusConfig
from shared.bus.formats import metadata_version
from shared.bus.outgoing import DUE_METADATA
from shared.bus.state.damaged import ROW_ERRORS, OnDamaged
from shared.bus.state.rows import EndpointRows, TableRows
from shared.cleanup.batching import (
    delete_blobs,
    delete_rows,
)
from shared.cleanup.report import TaskReport, describe
from shared.cleanup.settings import CleanupSettings
from shared.errors import (
    ConfigurationError,
    NewerVersion,
    NotFound,
)
from shared.logsafe import shown
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer, BlobProperties
from shared.stores.table import Entity

# One logger for every task's lines, under the name they have always had, so that a log
# filter written for the cleanup's tasks keeps working whichever module a task lives in.
log = logging.getLogger("shared.cleanup.tasks")


def skip_bad_row(report: TaskReport, what: str, error: BaseException) -> None:
    """Report a record that cannot be judged and pass over it: one bad row must not keep
    every later one from being cleaned, nor end the run."""
    log.warning("cleanup %s: skipping bad record %s: %s", report.task, what, describe(error))
    report.bad_row(what, error)


def skipping(report: TaskReport) -> OnDamaged:
    """What a store's page does with a row it cannot read: skip it as a bad record."""
    return lambda damaged: skip_bad_row(report, damaged.where, damaged.error)


UNJUDGED = (NewerVersion, *ROW_ERRORS)
"""What keeps a record or token from being judged: a newer version wrote it, or it is bad."""


def skip_unjudged(report: TaskReport, what: str, error: BaseException) -> None:
    """Keep a record or token this version cannot judge, and pass over it: one a newer
    version wrote is kept for an upgraded instance's cleanup (never deleted on a guess), a bad
    one is reported as such."""
    if isinstance(error, NewerVersion):
        log.warning("cleanup %s: keeping %s: %s", report.task, what, shown(error))
        report.kept["newer_version"] += 1
    else:
        skip_bad_row(report, what, error)


def storage_error(report: TaskReport, what: str, error: BaseException) -> None:
    log.warning("cleanup %s: %s left for the next pass: %s", report.task, what, error)
    report.kept["storage_error"] += 1


def add_count(counter: Counter[str], key: str, count: int) -> None:
    """Count only what happened, so a report lists no zeros."""
    if count:
        counter[key] += count


def row_name(rows: EndpointRows, entity: Entity) -> str:
    return rows.where(entity.partition_key, entity.row_key)


@dataclass(frozen=True)
class CleanupContext:
    account: StorageAccount
    config: BusConfig
    settings: CleanupSettings
    endpoints: Mapping[str, EndpointRows]
    """The endpoints the cleanup looks after, each with its rows, in whichever store keeps
    them: chosen by whoever composes the cleanup, never here."""
    now: datetime
    limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    """How many records are judged at once. The job shares one limit of
    ``CLEANUP_CONCURRENCY`` across a pass; a context made on its own (a sweep, a simulation)
    judges one record at a time, so its storage calls come in a fixed order."""

    def rows(self, table: str) -> EndpointRows:
        """The rows of an endpoint (as given in ``endpoints``) or of the ingress table: the
        tasks' one way to any row."""
        rows = self.endpoints.get(table)
        if rows is not None:
            return rows
        if table == self.config.ingress_table:
            # The ingress records are the bus's own, no endpoint's: always in this table.
            return TableRows(self.account.table(table))
        raise ConfigurationError(f"the cleanup was given no rows of endpoint {table}")

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.grace_seconds)

    @property
    def tokens(self) -> BlobContainer:
        return self.account.blob_container(self.config.tokens_container)

    @property
    def payloads(self) -> BlobContainer:
        return self.account.blob_container(self.config.payloads_container)

    def is_old(self, moment: datetime) -> bool:
        """True once ``moment`` is at least one grace period in the past."""
        return moment + self.grace <= self.now


class CleanupTask(abc.ABC):
    id: str

    @abc.abstractmethod
    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        """Process one page starting at ``continuation``; return where the next page starts,
        or None when the pass is complete."""


async def _exists(tokens: BlobContainer, name: str) -> bool:
    try:
        await tokens.get_properties(name)
    except NotFound:
        return False
    return True


async def clear_prefix(
    context: CleanupContext, prefix: str, committed: Collection[str], report: TaskReport
) -> int:
    """Delete the abandoned tokens under a sender-scoped prefix; return how many tokens must
    still wait there (committed ones not yet received, or abandoned ones still young).

    A committed token that is claimed counts as consumed: its receiver read it, so it was
    signalled, and the receiver's own cleanup deletes it (R7 is the cleanup's). Waiting for
    it to be gone would keep each sender's record one pass longer per hop of a chain."""
    waiting = 0
    doomed: list[BlobProperties] = []
    async for blob in context.tokens.list(prefix):
        if blob.name in committed:
            waiting += not blob.metadata.get("claim")
        elif (
            not context.is_old(blob.last_modified)
            or not readable_metadata(blob, report)  # never deleted on a guess
        ):
            waiting += 1
        elif blob.metadata.get("claim"):
            waiting += 1  # claimed means signalled: never ours, whatever the record says
        else:
            doomed.append(blob)
    # One that could not be deleted was consumed or deleted since it was listed.
    add_count(report.removed, "abandoned_tokens", await delete_blobs(context.tokens, doomed))
    return waiting


def readable_metadata(blob: BlobProperties, report: TaskReport) -> bool:
    """Whether this version reads the token's metadata; one it cannot read (newer, or
    damaged) is kept, and reported."""
    try:
        metadata_version(blob.metadata, f"token {shown(blob.name)}")
    except UNJUDGED as e:
        skip_unjudged(report, f"token {blob.name!r}", e)
        return False
    return True


async def remove_rows(
    context: CleanupContext,
    rows: EndpointRows,
    condemned: Sequence[tuple[Entity, str]],
    report: TaskReport,
) -> None:
    """Delete the rows judged removable (each with the kind it is counted as); a row that
    changed since it was read stays for the next pass."""
    kinds = {(e.partition_key, e.row_key): kind for e, kind in condemned}
    deleted = await delete_rows(context.limit, rows, [e for e, _ in condemned])
    for row in deleted:
        report.removed[kinds[row.partition_key, row.row_key]] += 1
    add_count(report.kept, "changed", len(condemned) - len(deleted))  # judged again next pass


def since(blob: BlobProperties) -> datetime:
    """Since when a token's age counts: its last change, or for a delayed message its due time
    (``shared.bus.schedule``), before which it is in flight however old it is. A due time
    that does not parse counts as none: the token is then judged by its age as any other."""
    due = blob.metadata.get(DUE_METADATA)
    if due:
        try:
            return max(blob.last_modified, datetime.fromisoformat(due))
        except (ValueError, TypeError):
            log.warning("token %s has a due time that is not a time: %r", blob.name, due[:80])
    return blob.last_modified
