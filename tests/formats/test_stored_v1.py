"""This version reads the stored records it wrote before any record carried a format version:
the checked-in ``fixtures/stored_v1.json`` (``stored_v1.py`` says how it was made)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from shared.bus.deliveries import decode_signals
from shared.bus.records import OutboxRecord
from shared.bus.state.properties import decode_properties
from shared.stores.table import Entity
from tests.formats.stored_v1 import CLAIM, FIXTURE, LATER, SECOND, examples
from tests.formats.wire_v1 import DUE, INCOMING, OUT

WRITTEN: dict[str, Any] = json.loads(FIXTURE.read_text())


def entity(row: dict[str, Any]) -> Entity:
    """A fixture's entity with its typed properties."""
    properties = {
        name: datetime.fromisoformat(value["datetime"]) if isinstance(value, dict) else value
        for name, value in row["properties"].items()
    }
    return Entity(row["partition_key"], row["row_key"], properties)


def test_this_version_still_writes_the_stored_records_as_the_fixture_holds_them() -> None:
    assert examples() == WRITTEN


def test_outbox_records_are_read_from_the_table_and_from_postgresql_alike() -> None:
    for status in ("claimed", "committed"):
        row = entity(WRITTEN["outbox"]["table"][status])
        from_sql = Entity(
            row.partition_key,
            row.row_key,
            decode_properties(WRITTEN["outbox"]["postgres"][status]),
        )

        record = OutboxRecord.from_entity(row)

        assert OutboxRecord.from_entity(from_sql) == record
        assert (record.message_id, record.claim, record.status) == (INCOMING, CLAIM, status)


def test_a_committed_outbox_record_lists_its_deliveries_and_abandoned_attempts() -> None:
    record = OutboxRecord.from_entity(entity(WRITTEN["outbox"]["table"]["committed"]))

    assert [o.message_id for o in record.outgoing] == [OUT, LATER]
    assert [o.deliver_at for o in record.outgoing] == [None, DUE]
    assert record.abandoned == (SECOND,)


def test_both_ingress_records_list_the_send_they_recorded() -> None:
    unscoped = entity(WRITTEN["ingress"]["unscoped"])
    scoped = entity(WRITTEN["ingress"]["scoped"])

    assert decode_signals(str(unscoped["outgoing"])) == decode_signals(str(scoped["outgoing"]))
    assert (scoped["scope"], scoped["key"]) == ("cli", unscoped.partition_key)
    assert "scope" not in unscoped.properties
