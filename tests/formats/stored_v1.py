"""The stored records as this version writes them, beside ``wire_v1.py``'s envelopes, signals,
token metadata and poison wrappers: O(m) (claimed, and committed with its deliveries listed
compactly) as a Table Storage entity and as the PostgreSQL store keeps it (a ``bus.mode_rows``
row's ``properties`` text), and the ingress record with and without a sender scope, each as
a real ingress send wrote it, for ``fixtures/stored_v1.json``.

Same rules as ``wire_v1.py``: written once by this version, checked in, never rewritten;
later versions must still read it. ``python -m tests.formats.stored_v1`` writes the file only
if it is absent."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.config import BusConfig
from shared.bus.deliveries import OutgoingSignal
from shared.bus.formats import FIRST
from shared.bus.ingress import INGRESS_ROW, IngressClient
from shared.bus.records import OutboxRecord
from shared.bus.state.properties import encode_properties
from shared.bus.topics import RecipientLists
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity
from tests.formats.wire_v1 import ATTEMPT, CREATED, DUE, INCOMING, OUT, SENDER
from tests.formats.written_once import write_once

FIXTURE = Path(__file__).parent / "fixtures" / "stored_v1.json"
CLAIM = "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b"
LATER = "7f6e5d4c-3b2a-4198-8776-655443322110"
LATER_ATTEMPT = "1a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d"
SECOND = "2b3c4d5e-6f70-4a8b-9c0d-1e2f3a4b5c6e"
INGRESS_AT = 1_795_000_000.0
"""The ingress records' clock: their windows are over by now, so tests set a clock to read them
as live."""


class ShipOrder(Command):
    partition_by = "order_id"
    order_id: str


def _outbox(version: int) -> tuple[OutboxRecord, OutboxRecord]:
    token = f"{SENDER}/{INCOMING}/{{attempt}}/{{out}}/{'d' * 43}"
    outgoing = [
        OutgoingSignal(
            destination="shipping",
            message_id=OUT,
            attempt_id=ATTEMPT,
            token=token.format(attempt=ATTEMPT, out=OUT),
            partition_key="order-17",
            type="ShipOrder",
        ),
        OutgoingSignal(
            destination="billing",
            message_id=LATER,
            attempt_id=LATER_ATTEMPT,
            token=token.format(attempt=LATER_ATTEMPT, out=LATER),
            partition_key="order-17",
            type="ChargeOrder",
            deliver_at=DUE,
        ),
    ]
    claimed = OutboxRecord(
        partition_key="order-17",
        message_id=INCOMING,
        claim=CLAIM,
        incoming_token=f"web/{SECOND}/{ATTEMPT}/{INCOMING}/{'e' * 43}",
        started_at=CREATED,
        format=version,
    )
    committed = claimed.committing(outgoing, [SECOND], CREATED + timedelta(seconds=1))
    return claimed, committed


def _typed(entity: Entity) -> dict[str, Any]:
    """An entity as JSON: its keys and properties, a datetime as ``{"datetime": iso}``."""
    return {
        "partition_key": entity.partition_key,
        "row_key": entity.row_key,
        "properties": {
            name: {"datetime": value.isoformat()} if isinstance(value, datetime) else value
            for name, value in entity.properties.items()
        },
    }


async def _ingress_record(scopes: bool, version: int) -> Entity:
    """The record a real ``bus send`` by the CLI writes, with ids drawn from a counter."""
    clock = ManualClock(INGRESS_AT)
    account = MemoryStorageAccount(clock=clock)
    counter = itertools.count()
    config = BusConfig(
        clock=clock,
        ingress_key_scopes=scopes,
        wire_format=version,
        new_id=lambda: f"00000000-0000-4000-8000-{next(counter):012d}",
    )
    app = BusApp()

    @app.endpoint("shipping").handles(ShipOrder)
    def ship(ctx: HandlerContext[Any], cmd: ShipOrder) -> None: ...

    for container in (config.tokens_container, config.topics_container):
        await account.blob_container(container).create_if_missing()
    await account.table(config.ingress_table).create_if_missing()
    await account.queue("shipping").create_if_missing()
    topics = RecipientLists(account.blob_container(config.topics_container), clock)
    client = IngressClient(account, topics, config, "cli", routes=app.routes)
    await client.send(ShipOrder(order_id="order-17"), to="shipping", idempotency_key="order-17")
    [record] = [e async for e in account.table(config.ingress_table).query_all()]
    if record.row_key != INGRESS_ROW:
        raise SystemExit(f"unexpected ingress row {record.row_key!r}")
    return record


def examples(version: int = FIRST) -> dict[str, Any]:
    """Every example, as it is stored in format ``version`` (since format versions exist:
    the fixture holds format 1, ``wire_v2.py`` writes format 2)."""
    claimed, committed = _outbox(version)
    return {
        "outbox": {
            "table": {
                "claimed": _typed(claimed.to_entity()),
                "committed": _typed(committed.to_entity()),
            },
            "postgres": {
                "claimed": encode_properties(claimed.to_entity().properties),
                "committed": encode_properties(committed.to_entity().properties),
            },
        },
        "ingress": {
            "unscoped": _typed(asyncio.run(_ingress_record(scopes=False, version=version))),
            "scoped": _typed(asyncio.run(_ingress_record(scopes=True, version=version))),
        },
    }


def main(argv: list[str] | None = None) -> int:
    return write_once("tests.formats.stored_v1", __doc__, FIXTURE, examples, argv)


if __name__ == "__main__":
    raise SystemExit(main())
