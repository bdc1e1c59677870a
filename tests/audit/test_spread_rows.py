"""The audit reads an audit row whose ``caused`` list was spread across properties by the
rows (``shared.stores.spread``), as a message that caused more deliveries than one Table
Storage property lists leaves it."""

from __future__ import annotations

import json

from shared.audit.rows import AUDIT_COLUMNS, audit_row
from shared.bus.records import AuditRecord
from shared.clock import to_datetime
from shared.stores.spread import spread
from shared.stores.table import Entity

DELIVERIES = 600
"""About 50,000 characters of JSON: more than one property holds."""


def spread_audit_properties() -> dict[str, object]:
    record = AuditRecord(
        partition_key="p1",
        endpoint="orders",
        message_id="m1",
        message_type="PlaceOrder",
        source="ingress",
        correlation_id="c1",
        causation_id=None,
        sent_at=to_datetime(0),
        processed_at=to_datetime(1),
        mode="token",
    )
    caused = [
        {"id": f"{n:036d}", "type": "OrderPlaced", "destination": f"subscriber{n:03d}"}
        for n in range(DELIVERIES)
    ]
    entity = record.to_entity()
    long_row = Entity("p1", entity.row_key, {**entity.properties, "caused": json.dumps(caused)})
    written = spread(long_row)
    assert "caused__parts" in written.properties  # the list outgrew one property
    return {"PartitionKey": "p1", "RowKey": entity.row_key, **written.properties}


CAUSED = AUDIT_COLUMNS.index("caused")


def test_a_spread_caused_list_is_read_whole() -> None:
    row = audit_row("orders", "p1", spread_audit_properties())

    deliveries = row[CAUSED]
    assert isinstance(deliveries, list)
    assert len(deliveries) == DELIVERIES
    assert deliveries[-1]["destination"] == f"subscriber{DELIVERIES - 1:03d}"


def test_a_caused_list_missing_a_part_reads_as_invalid_not_as_fewer_deliveries() -> None:
    properties = spread_audit_properties()
    del properties["caused__1"]

    row = audit_row("orders", "p1", properties)

    assert row[CAUSED] is None  # the audit reports the row invalid
    assert row[3] == "m1"  # and still names it
