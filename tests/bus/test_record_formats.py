"""Records list their signals compactly, and the records of the first format are still read.

``fixtures/records_v1.json`` holds rows as the bus wrote them before the compact format
(commit 9ff4665): for each endpoint mode, the rows of a hub endpoint that handled Announce by
publishing Announced to two subscribers at once and again five minutes later (the entity
outbox's row taken before its signals were sent, so its entry still lists them), and the
ingress records of a client's send to the token-mode hub and of a client's publish."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from shared.audit.rows import deliveries_of_ingress
from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.deliveries import (
    OutgoingSignal,
    decode_signals,
    encode_signals,
    first_format,
)
from shared.bus.envelope import TOKEN_NAME
from shared.bus.ids import derived_id, fresh_id
from shared.bus.ingress import INGRESS_ROW
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import ProcessedRecord
from shared.bus.modes.state_based import IndexEntry
from shared.bus.records import OutboxRecord
from shared.cleanup.origins import kind_of
from shared.clock import ManualClock
from shared.errors import CorruptRecord
from shared.stores.memory import MemoryStorageAccount
from shared.stores.names import utf16_size
from shared.stores.spread import gathered, spread
from shared.stores.table import Entity
from tests.bus.harness import Harness
from tests.conftest import Backend

FIXTURE = Path(__file__).parent / "fixtures" / "records_v1.json"
WRITTEN_AT = 1_790_000_000.0
"""The clock of the run that wrote the fixture: its ingress records are within their window."""


def v1_rows() -> dict[str, list[Entity]]:
    data: dict[str, list[dict[str, Any]]] = json.loads(FIXTURE.read_text())
    return {group: [_entity(row) for row in rows] for group, rows in data.items()}


def _entity(row: dict[str, Any]) -> Entity:
    properties = {
        name: datetime.fromisoformat(value["datetime"]) if isinstance(value, dict) else value
        for name, value in row["properties"].items()
    }
    return Entity(row["partition_key"], row["row_key"], properties)


def row(group: str, prefix: str) -> Entity:
    [found] = [e for e in v1_rows()[group] if e.row_key.startswith(prefix)]
    return found


def attempts_in_v1_text(entity: Entity) -> frozenset[str]:
    """The attempt ids the first format's text names, read without the bus's parser."""
    entries = json.loads(str(entity["outgoing"]))
    return frozenset(_attempt(e["token"]) for e in entries)


def _attempt(token: str) -> str:
    match = TOKEN_NAME.fullmatch(token)
    assert match is not None, token
    return match["attempt"]


# -- the first format is read --------------------------------------------------------------------


def test_a_first_format_outbox_record_is_read_with_its_ids_and_due_times() -> None:
    entity = row("token", "outbox|")

    record = OutboxRecord.from_entity(entity)

    incoming = record.message_id
    assert [(o.destination, o.message_id) for o in record.outgoing] == [
        ("sub0token", derived_id(incoming, "out", 0, "sub0token")),
        ("sub1token", derived_id(incoming, "out", 0, "sub1token")),
        ("sub0token", derived_id(incoming, "out", 1, "sub0token")),
        ("sub1token", derived_id(incoming, "out", 1, "sub1token")),
    ]
    assert {o.attempt_id for o in record.outgoing} == attempts_in_v1_text(entity)
    assert [o.deliver_at is not None for o in record.outgoing] == [False, False, True, True]
    assert [o.partition_key for o in record.outgoing] == ["k1", "k1", "k1-later", "k1-later"]


@pytest.mark.parametrize(
    ("group", "prefix"),
    [
        ("token", "outbox|"),
        ("processed_messages", "processed|"),
        ("state_based", "msgidx|"),
        ("ingress", INGRESS_ROW),
    ],
)
def test_the_cleanup_judges_first_format_rows_by_the_attempts_they_committed(
    group: str, prefix: str
) -> None:
    for entity in [e for e in v1_rows()[group] if e.row_key.startswith(prefix)]:
        kind = kind_of(entity.row_key)
        assert kind is not None
        incoming = str(entity.get("incoming_id", entity.row_key.partition("|")[2]))

        assert kind.committed_attempts(entity, incoming) == attempts_in_v1_text(entity)


def test_a_first_format_entity_outbox_entry_still_lists_its_signals() -> None:
    entity = row("entity_outbox", "state")

    [entry] = StateEntity.from_entity(entity).entries.values()

    assert entry.out is not None
    assert [o.attempt_id for o in entry.out] == list(entry.sent)
    assert len(entry.out) == 4


def test_the_audit_reads_the_deliveries_of_both_formats_of_ingress_record() -> None:
    for entity in v1_rows()["ingress"]:
        signals = decode_signals(str(entity["outgoing"]))
        expected = [
            {"id": s.message_id, "type": s.type, "destination": s.destination} for s in signals
        ]

        assert deliveries_of_ingress(entity["outgoing"]) == expected
        assert deliveries_of_ingress(encode_signals(signals)) == expected


class Announce(Command):
    partition_by = "topic_key"
    topic_key: str


class Announced(Event):
    partition_by = "topic_key"
    topic_key: str


class Seen(BaseModel):
    applied: list[str] = []


async def test_a_retry_is_answered_from_a_first_format_ingress_record() -> None:
    """The client's retry finds the record the first format wrote, returns its message ids
    and sends its signal again (R6 resumed), which the hub then processes once."""
    clock = ManualClock(WRITTEN_AT)
    app = BusApp()
    hub = app.endpoint("hubtoken", state=Seen)

    @hub.handles(Announce)
    def announce(ctx: HandlerContext[Seen], cmd: Announce) -> None:
        ctx.state.applied.append(ctx.message_id)

    harness = await Harness.create(Backend("memory", MemoryStorageAccount(clock=clock), clock), app)
    [written] = [e for e in v1_rows()["ingress"] if e.partition_key == "announce-1"]
    await harness.raw.table(harness.config.ingress_table).insert(written)
    [first] = decode_signals(str(written["outgoing"]))

    receipt = await harness.setup_bus.client().send(
        Announce(topic_key="k1"), to="hubtoken", idempotency_key="announce-1"
    )

    assert receipt.deduplicated
    assert receipt.message_ids == (first.message_id,)
    [signal] = await harness.raw.queue("hubtoken").peek()
    assert json.loads(signal.content)["token"] == first.token


# -- the compact format ----------------------------------------------------------------------------


def signal(
    incoming: str, index: int, destination: str, *, sender: str = "hub", **fields: Any
) -> OutgoingSignal:
    message_id = fields.pop("message_id", derived_id(incoming, "out", index, destination))
    attempt = fresh_id()
    return OutgoingSignal(
        destination=destination,
        message_id=message_id,
        attempt_id=attempt,
        token=f"{sender}/{incoming}/{attempt}/{message_id}/{'d' * 43}",
        partition_key=fields.pop("partition_key", "p1"),
        type=fields.pop("type", "Announced"),
        **fields,
    )


def test_every_kind_of_signal_comes_back_as_it_was_listed() -> None:
    """Two outputs, one delayed, an output with no delivery between them (an event nobody
    subscribes to), an id not derived from the output's index and a token name from before
    digests: each reads back equal, in order."""
    incoming = fresh_id()
    due = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
    listed = [
        signal(incoming, 0, "suba"),
        signal(incoming, 0, "subb"),
        signal(incoming, 2, "suba", partition_key="p2", deliver_at=due + timedelta(hours=1)),
        signal(incoming, 3, "subc", message_id=fresh_id()),
        OutgoingSignal(
            destination="suba",
            message_id=(old := fresh_id()),
            attempt_id=(attempt := fresh_id()),
            token=f"hub/{incoming}/{attempt}/{old}",
            partition_key="p1",
            type="Announced",
        ),
        signal(incoming, 4, "subb", sender="ingress"),
    ]

    text = encode_signals(listed)

    assert decode_signals(text) == tuple(listed)
    stored = json.loads(text)
    assert [len(o.get("to", [])) for o in stored["outputs"]] == [2, 1, 1, 0, 1]
    assert len(stored["outputs"][2]["to"][0]) == 4  # its message id kept: not derivable


def test_one_output_to_a_thousand_subscribers_takes_under_a_third_of_the_first_format() -> None:
    incoming = fresh_id()
    listed = [signal(incoming, 0, f"sub{n:04d}") for n in range(1000)]

    compact, first = utf16_size(encode_signals(listed)), utf16_size(first_format(listed))

    assert compact < 200_000 < first / 2  # about 190 and 480 bytes a delivery
    assert decode_signals(encode_signals(listed)) == tuple(listed)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not json", "not JSON"),
        ('{"v": 3, "outputs": []}', "format 3, newer than this version reads"),
        (
            '{"v": 2, "outputs": [{"tokens": "hub/x", "type": "T", "pk": "p", "index": 0, '
            '"to": [["d", "a", "g"]]}]}',
            "not a token name",
        ),
        ('{"v": 2, "outputs": [{"tokens": "hub/x", "index": -1}]}', "signals"),
        ('{"outputs": 1}', "signals"),
    ],
)
def test_a_damaged_list_of_signals_is_a_corrupt_record_saying_why(text: str, why: str) -> None:
    with pytest.raises(CorruptRecord, match=why):
        decode_signals(text)


async def test_a_compact_outbox_record_larger_than_a_property_is_written_and_read_back() -> None:
    """2,500 deliveries: about 480 KB, spread over the row's properties, read back whole."""
    incoming = fresh_id()
    listed = tuple(signal(incoming, 0, f"sub{n:04d}") for n in range(2500))
    record = OutboxRecord(
        partition_key="p1",
        message_id=incoming,
        claim=fresh_id(),
        incoming_token="-",
        started_at=datetime.now(UTC),
        status="committed",
        committed_at=datetime.now(UTC),
        outgoing=listed,
    )
    table = MemoryStorageAccount().table("hub")
    await table.create_if_missing()

    await table.insert(spread(record.to_entity()))

    [stored] = [e async for e in table.query_all()]
    assert OutboxRecord.from_entity(gathered(stored)).outgoing == listed


def test_window_mode_rows_read_both_formats() -> None:
    processed = row("processed_messages", "processed|")
    index = row("state_based", "msgidx|")

    for entity, read in ((processed, ProcessedRecord), (index, IndexEntry)):
        first = read.from_entity(entity)
        compact = Entity(
            entity.partition_key,
            entity.row_key,
            {**entity.properties, "outgoing": encode_signals(first.outgoing)},
        )

        assert read.from_entity(compact).outgoing == first.outgoing
        assert first.committed_attempts == attempts_in_v1_text(entity)
