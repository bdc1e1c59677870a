"""The cleanup's task for the discard archive (``shared.bus.discard``, docs/console.md).

An operator's discard writes the poison message to the ``discarded`` container with its
``keep_until`` in the blob's metadata; this task deletes the entries whose ``keep_until`` has
passed, judged from the listing alone (no body is read). An entry whose ``keep_until`` is
missing or is not a time is kept and reported: the archive is the last copy of a message an
operator chose to drop, so nothing in it goes on a guess. The delete is guarded by the ETag
the entry was listed with, so an entry rewritten since is judged again by the next pass.
"""

from __future__ import annotations

from shared.bus.discard import KEEP_UNTIL
from shared.bus.unsubscribed import parse_time
from shared.cleanup.base import CleanupContext, CleanupTask
from shared.cleanup.batching import delete_blobs
from shared.cleanup.report import TaskReport
from shared.errors import NotFound
from shared.logsafe import shown
from shared.stores.blob import BlobProperties


class ExpiredDiscards(CleanupTask):
    """Delete the archive entries of discarded messages once their retention has passed."""

    id = "discarded"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        archive = context.account.blob_container(context.config.discarded_container)
        try:
            page = await archive.list_page(
                page_size=context.settings.page_size, continuation=continuation
            )
        except NotFound:
            return None  # no archive yet: nothing was ever discarded
        expired = [blob for blob in page.items if _expired(context, blob, report)]
        removed = await delete_blobs(archive, expired)
        if removed:
            report.removed["discarded_entries"] += removed
        if len(expired) > removed:
            report.kept["changed"] += len(expired) - removed
        return page.continuation


def _expired(context: CleanupContext, blob: BlobProperties, report: TaskReport) -> bool:
    keep_until = parse_time(blob.metadata, KEEP_UNTIL)
    if keep_until is None:
        raw = blob.metadata.get(KEEP_UNTIL, "")
        report.bad_row(
            f"archive entry {shown(blob.name)}",
            ValueError(f"{KEEP_UNTIL} is not a time with a zone: {shown(raw[:80])}"),
        )
        return False
    if keep_until > context.now:
        report.kept["within_retention"] += 1
        return False
    return True
