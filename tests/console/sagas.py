"""Saga instances as an operator may find them, for the console's tests: on the saga app's
``checkout``, one live instance, one completed, two messages that found none (a ``Poke``
for an instance never started, and a ``Start`` after completion), all processed by the
receiver; then, written directly as a saga's row (``request_timeout`` keeps its handles
there), an instance waiting for two timeouts, one overdue, whose names are markup; and a
row no saga wrote."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from shared.bus import Command
from shared.bus.pipeline import Outcome
from shared.bus.records import STATE_ROW
from shared.bus.saga import SAGA_ROW_TYPE, PendingTimeout, SagaRow
from shared.provisioning import provision
from shared.runtime import Worker
from shared.settings import Settings
from shared.stores.account import StorageAccount
from shared.stores.table import Entity
from tests.console.saga_app import CHECKOUT, Finish, Poke, Start, app

MARKUP = "<img src=x onerror=\"window.__pwned = 'saga'\">"
"""Markup as a correlation value, a timeout's type and a message id: allowed in a partition
key, shown as text."""
WAITING = "waiting-1"
DAMAGED = Entity("damaged-1", STATE_ROW, {"type": SAGA_ROW_TYPE, "data": "{"})
OVERDUE_BY = timedelta(hours=1)


async def leave_instances(account: StorageAccount) -> None:
    worker = Worker(app, Settings({}, {}), account)
    try:
        await provision(account, worker.resources)
        await _processed(worker, Start(order_id="live-1"), Start(order_id="done-1"))
        await _processed(worker, Finish(order_id="done-1"))
        await _processed(worker, Poke(order_id="never-1"), Start(order_id="done-1"))
        rows = worker.endpoint_rows()[CHECKOUT]
        now = datetime.now(UTC)
        waiting = SagaRow(
            state={"steps": ["started"]},
            timeouts=(
                PendingTimeout(
                    message_id="t-overdue", type="PaymentDue", due=now - OVERDUE_BY, handle={}
                ),
                PendingTimeout(
                    message_id=MARKUP, type=MARKUP, due=now + timedelta(days=1), handle={}
                ),
            ),
            started_by=MARKUP,
        )
        for partition in (WAITING, MARKUP):
            data = {"type": SAGA_ROW_TYPE, "data": waiting.to_json()}
            await rows.insert(Entity(partition, STATE_ROW, data))
        await rows.insert(DAMAGED)
    finally:
        await worker.close()


async def _processed(worker: Worker, *messages: Command) -> None:
    """Send ``messages`` to the saga through the ingress and process them, in order."""
    client = worker.bus().client()
    queue = worker.account().queue(CHECKOUT)
    for message in messages:
        key = f"{type(message).__name__}-{message.partition_key()}-{uuid.uuid4()}"
        await client.send(message, to=CHECKOUT, idempotency_key=key)
        [received] = await queue.receive(1, visibility_timeout=60)
        outcome = await worker.receive(CHECKOUT, received.content.encode(), 1)
        assert outcome in (Outcome.PROCESSED, Outcome.SAGA_NOT_FOUND), outcome
        await queue.delete(received.id, received.pop_receipt)
