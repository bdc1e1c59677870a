"""The shared-payload task: remove a payload (``shared.bus.payloads``) once no token can
still need it.

A payload ``{sender}/{incoming-id}/{digest}`` is written by a round of ``sender`` processing
``incoming-id`` (create or overwrite, before any of the round's tokens exists), and every
token that refers to it lives under the tokens prefix ``{sender}/{incoming-id}/``. It is
deleted only when all of these hold, checked in this order, each for the reason given:

(a) it is older than the grace period. A round rewrites its payloads before it creates its
    tokens, so a payload written less than a grace period ago may belong to a round still
    creating tokens (or to a token create still in the network, landing late); the grace
    period outlasts an invocation plus a late request (design notes, section 3).
(c) its origin row (the ``origin`` metadata, as a token's: ``shared.cleanup.origins``) is
    committed, absent, or, when it is an uncommitted O(m), fenced first exactly as the
    token task fences it (an unchanged rewrite, for a new ETag). Past (a) the only round
    that could still create a token referring to the payload is one slower than the grace
    period (outside the timing assumptions): the fence makes its commit (If-Match on O(m))
    fail, so it never signals a token whose payload is gone (``small-unbounded-sweep``).
    Checked before (b), not after: with the tokens listed first, such a round (or a pass
    paused between its two requests) could create its tokens and commit between the
    listing and the read of its row, which would then say committed while the listing said
    no token. After the fence, a round that committed first has its tokens in place for (b)
    to see, and one that had not can no longer commit.
(b) no token exists under ``{sender}/{incoming-id}/`` (one list request of page size 1).
    A token that exists may be signalled (or be signalled again, or be replayed from the
    poison queue) and its receiver reads the payload: while one is there, the payload stays.
    Tokens go only once consumed (R7, the receiver's or its cleanup's) or abandoned (the
    token task), so once none is left no receiver can need the payload, except a duplicate
    signal, which then finds its token gone too and is acknowledged as a duplicate
    (``shared.bus.pipeline``, PayloadMissing).
(d) it is deleted ``If-Match`` the ETag it was judged by in (a): a round that rewrote it
    since then (it is about to create tokens referring to it) wins, and the payload stays.

A payload whose name is outside the scheme, or whose origin metadata is not an origin of this
bus, is kept and reported: the cleanup never deletes on the word of metadata it cannot judge.
The payloads container is shared by the apps of a system: a payload whose origin is well formed
but names a table that is not this app's (``other_app``, ``shared.cleanup.abandoned_tokens``)
is another app's, kept without a word for that app's cleanup, which can read its origin row.
"""

from __future__ import annotations

import logging

from shared.bus.envelope import PAYLOAD_NAME, token_prefix
from shared.bus.origin import Origin
from shared.bus.state.damaged import DamagedRow
from shared.cleanup.abandoned_tokens import origin_of
from shared.cleanup.base import CleanupContext, CleanupTask
from shared.cleanup.batching import STORAGE_ERRORS, read_rows
from shared.cleanup.origins import OriginKind
from shared.cleanup.report import TaskReport, describe
from shared.errors import NewerVersion, NotFound, PreconditionFailed
from shared.logsafe import shown
from shared.stores.blob import BlobProperties
from shared.stores.table import Entity

log = logging.getLogger(__name__)


class SharedPayloads(CleanupTask):
    """Every payload in the payloads container, judged by (a)-(d) of the module."""

    id = "payloads"

    async def run_page(
        self, context: CleanupContext, continuation: str | None, report: TaskReport
    ) -> str | None:
        page = await context.payloads.list_page(
            "", page_size=context.settings.page_size, continuation=continuation
        )
        for blob in page.items:
            try:
                kept = await self._judge(context, blob)
            except STORAGE_ERRORS as e:
                log.warning(
                    "cleanup payloads: %s left for the next pass: %s", shown(blob.name), shown(e)
                )
                kept = "storage_error"
            if kept is None:
                report.removed["payloads"] += 1
            else:
                report.kept[kept] += 1
        return page.continuation

    @staticmethod
    async def _judge(context: CleanupContext, blob: BlobProperties) -> str | None:
        """None once the payload is deleted, else why it stays."""
        if not context.is_old(blob.last_modified):  # (a)
            return "young"
        name = PAYLOAD_NAME.fullmatch(blob.name)
        if name is None:
            log.warning("payload %s is outside the payload naming scheme: kept", shown(blob.name))
            return "bad_name"
        found = origin_of(context, blob)  # (c), before (b): see the module
        if isinstance(found, str):
            if found != "abandoned":  # no origin recorded, and still within the ingress window
                return found
        else:
            kept = await _fence(context, *found, blob)
            if kept is not None:
                return kept
        prefix = token_prefix(name["sender"], name["incoming"])
        if (await context.tokens.list_page(prefix, page_size=1)).items:  # (b)
            return "tokens_waiting"
        try:
            await context.payloads.delete(blob.name, etag=blob.etag)  # (d)
        except (PreconditionFailed, NotFound):
            return "changed"  # rewritten by a round since it was judged: judged again later
        return None


async def _fence(
    context: CleanupContext, origin: Origin, kind: OriginKind, blob: BlobProperties
) -> str | None:
    """Condition (c): None when the origin row lets the payload go (committed, absent, or
    uncommitted and now fenced), else why it stays."""
    rows = await read_rows(context.limit, context.rows, [origin])
    if origin not in rows:
        return "storage_error"  # its row could not be read
    row = rows[origin]
    if isinstance(row, DamagedRow):
        log.warning("cleanup payloads: %s kept: %s", shown(blob.name), describe(row.error))
        return "bad_origin_row"
    if isinstance(row, Entity) and kind.fence is not None:
        try:
            await kind.fence(context.rows(origin.table), row)
        except (PreconditionFailed, NotFound):
            return "origin_changed"  # someone wrote it meanwhile: judged again next pass
        except NewerVersion as e:
            log.warning("cleanup payloads: %s kept: %s", shown(blob.name), shown(e))
            return "newer_version"  # its origin row is for a newer version to judge
    return None
