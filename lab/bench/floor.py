"""The at-least-once floor: the same two handlers with no deduplication at all.

A plain queue-triggered function: read the body, read the partition's state row, write it
back (upsert), and for the sender send one plain queue message. No token, no outbox record,
no ETag guard: a redelivered message is applied twice and concurrent updates of one partition
can overwrite each other. It is what exactly-once is measured against, not something to ship.
"""

from __future__ import annotations

import json

from lab.bench.workload import Done, Names, Tally, Work, plain_body
from shared.bus.records import STATE_ROW
from shared.errors import InvalidValue, NotFound
from shared.queue_trigger import Handler
from shared.stores.account import StorageAccount
from shared.stores.table import Entity


def _parse(raw: str) -> Work | Done:
    try:
        data = json.loads(raw)
        kind = data.pop("type")
    except (ValueError, KeyError, AttributeError) as e:
        raise InvalidValue(f"not a benchmark message: {raw[:80]!r}") from e
    if kind == "Work":
        return Work.model_validate(data)
    if kind == "Done":
        return Done.model_validate(data)
    raise InvalidValue(f"unknown benchmark message type {kind!r}")


async def _update_state(account: StorageAccount, table: str, message: Work | Done) -> None:
    store = account.table(table)
    try:
        entity = await store.get(message.key, STATE_ROW)
        state = Tally.model_validate_json(str(entity["data"]))
    except NotFound:
        state = Tally()
    state.count += 1
    state.total += message.amount
    await store.upsert(
        Entity(message.key, STATE_ROW, {"type": "Tally", "data": state.model_dump_json()})
    )


def floor_handlers(account: StorageAccount, names: Names) -> dict[str, Handler]:
    """One queue handler per endpoint queue, named like the bus endpoints."""

    async def sender(raw: str, dequeue_count: int) -> None:
        message = _parse(raw)
        await _update_state(account, names.sender, message)
        forwarded = Done(key=message.key, amount=message.amount, payload=message.payload)
        await account.queue(names.sink).send(plain_body(forwarded))

    async def sink(raw: str, dequeue_count: int) -> None:
        await _update_state(account, names.sink, _parse(raw))

    return {names.sender: sender, names.sink: sink}
