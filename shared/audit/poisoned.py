"""The deliveries waiting in poison queues: neither lost nor in flight, but parked with a
reason until an operator replays them (``bus replay``), after which they are processed once.

Each endpoint's poison queue is read through a ``StorageAccount`` in the driver (poison queues
are small: a message lands there only after its retries are exhausted or it was refused).
Messages are received a batch at a time so that every one is seen (a peek shows at most 32),
and are made visible again at the end: the audit takes nothing away. Their contents are not
trusted: a wrapper that cannot be read still counts, as a poisoned message whose delivery is
unknown, with why it cannot be read.

No pyspark here: the exporter uses it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from shared.audit.rows import Row
from shared.bus.poison import Unreadable, unwrap
from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.queue import MessageQueue, QueueMessage

HOLD_SECONDS = 120.0
"""How long a message the audit is reading stays hidden if the audit dies before showing it
again (it shows every one again as soon as it has read them all)."""
MAX_LISTED_REASON_CHARS = 500
BATCH = 32


def poisoned_row(queue: str, endpoint: str, content: str) -> Row:
    """``(queue, endpoint, message_id, message_type, reason)`` of one poison message; the id
    is None when neither the signal nor the reason names it."""
    try:
        parked = unwrap(content, endpoint)
    except Unreadable as e:
        return (queue, endpoint, None, None, f"unreadable poison message: {e}")
    reason = parked.reason[:MAX_LISTED_REASON_CHARS]
    return (queue, endpoint, parked.message_id, parked.message_type, reason)


async def _read_all(queue: MessageQueue) -> list[QueueMessage]:
    held: dict[str, QueueMessage] = {}
    try:
        while batch := await queue.receive(BATCH, visibility_timeout=HOLD_SECONDS):
            fresh = [m for m in batch if m.id not in held]
            held.update((m.id, m) for m in batch)
            if not fresh:
                break
    finally:
        for message in held.values():
            with contextlib.suppress(NotFound):
                await queue.update(message.id, message.pop_receipt, visibility_timeout=0)
    return list(held.values())


async def collect_poisoned(account: StorageAccount, endpoints: Sequence[str]) -> list[Row]:
    """Every message waiting in the poison queues of ``endpoints``; a queue that does not
    exist holds none."""
    rows: list[Row] = []
    for endpoint in endpoints:
        name = poison_queue(endpoint)
        try:
            messages = await _read_all(account.queue(name))
        except NotFound:
            continue
        rows.extend(poisoned_row(name, endpoint, m.content) for m in messages)
    return rows
