"""Audit rows and ingress records as flat rows: the one input format every reader produces.

Table Storage, the exported Parquet/JSON files and the synthetic bench data all use these
columns. ``caused`` (audit) and ``outgoing`` (ingress) are typed lists of deliveries
``{"id", "type", "destination"}`` (``array<struct<id,type,destination>>`` in Spark and
Parquet): one entry per delivery, because a published event gets its own message id per
subscriber (``shared.bus.outgoing.plan_deliveries``). Table Storage keeps them as JSON text;
they are parsed here, once, at that edge. A list that cannot be read becomes None, which the
audit counts as an invalid row.

No pyspark here: the exporter and the single-process baseline use these too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from shared.bus.deliveries import decode_signals
from shared.bus.formats import property_version
from shared.bus.records import caused_by
from shared.errors import CorruptRecord, NewerVersion
from shared.stores.spread import PARTS_SUFFIX, gathered_properties

AUDIT_COLUMNS = (
    "table",
    "partition_key",
    "endpoint",
    "message_id",
    "message_type",
    "source",
    "correlation_id",
    "causation_id",
    "mode",
    "sent_at",
    "processed_at",
    "caused",
    "outcome",
)
"""``outcome``: what became of a message whose handler did not simply run (``cancelled``,
``saga_not_found``; ``AuditRecord.outcome``), None for one processed as usual. Last, so that
the columns before it keep their places; an export from before it has none (read as None)."""
LATER_AUDIT_COLUMNS = frozenset({"outcome"})
"""Audit columns an older export may lack: read as None."""
INGRESS_COLUMNS = (
    "table",
    "idempotency_key",
    "sender",
    "incoming_id",
    "message_type",
    "created_at",
    "outgoing",
)
POISONED_COLUMNS = (
    "queue",
    "endpoint",
    "message_id",
    "message_type",
    "reason",
    "sender",
    "incoming_id",
    "claimed_id",
    "problem",
    "unread",
)
"""One row per message waiting in a poison queue (``shared.audit.poisoned``): ``message_id``,
``sender`` and ``incoming_id`` from its signal's token name, ``message_type`` and
``claimed_id`` as its wrapper says, ``problem`` why it cannot be verified (None when its
signal checks out). A row with ``unread`` set is no message: it marks a queue the audit
stopped reading at its cap, with about how many messages were left unread."""
DROPPED_COLUMNS = ("topic", "dropped", "first_dropped_at", "last_dropped_at")
"""One row per topic that events were published to with no subscriber
(``shared.audit.dropped``): how many, and the first and last drop's times (None: unknown)."""
TIMESTAMP_COLUMNS = frozenset(
    {"sent_at", "processed_at", "created_at", "first_dropped_at", "last_dropped_at"}
)
COUNT_COLUMNS = frozenset({"unread", "dropped"})
DELIVERY_COLUMNS = frozenset({"caused", "outgoing"})
"""Columns holding a typed list of deliveries."""

Delivery = dict[str, str | None]
"""``{"id", "type", "destination"}``: one message to one destination."""
DELIVERY_FIELDS = ("id", "type", "destination")
Value = str | int | datetime | list[Delivery] | None
Row = tuple[Value, ...]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _time(value: object) -> datetime | None:
    """A UTC datetime; the SDK hands out a datetime subclass carrying the raw service text,
    which Spark and pyarrow do not need to see."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    return datetime.fromtimestamp(value.timestamp(), tz=UTC)


def audit_row(table: str, partition_key: str, properties: Mapping[str, object]) -> Row:
    """One audit row (RowKey ``audit|{m}``) from its stored properties. Missing or mistyped
    values become None, which the audit reports as an invalid row instead of guessing."""
    properties = _joined(properties)
    return (
        table,
        partition_key,
        _text(properties.get("endpoint")),
        _text(properties.get("message_id")),
        _text(properties.get("message_type")),
        _text(properties.get("source")),
        _text(properties.get("correlation_id")),
        _text(properties.get("causation_id")) or None,
        _text(properties.get("mode")),
        _time(properties.get("sent_at")),
        _time(properties.get("processed_at")),
        deliveries_of_audit(properties.get("caused")),
        _text(properties.get("outcome")),
    )


def _joined(properties: Mapping[str, object]) -> Mapping[str, object]:
    """Texts spread across properties joined (``shared.stores.spread``); a text whose parts
    do not agree is left out, so its field reads as missing and the row as invalid."""
    try:
        return gathered_properties(properties, "audit row")
    except CorruptRecord:
        spread = {
            name.removesuffix(PARTS_SUFFIX) for name in properties if name.endswith(PARTS_SUFFIX)
        }
        return {name: value for name, value in properties.items() if name not in spread}


def _json_list(text: object) -> list[object] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def deliveries_of_audit(caused: object) -> list[Delivery] | None:
    """An audit row's ``caused`` JSON as typed deliveries; None when it is not a JSON list of
    objects. Fields that are not text become None, and the audit reports an entry without an
    id or a destination as invalid."""
    entries = _json_list(caused)
    if entries is None or not all(isinstance(e, dict) for e in entries):
        return None
    return [
        {f: v if isinstance(v := e.get(f), str) else None for f in DELIVERY_FIELDS}
        for e in entries
        if isinstance(e, dict)
    ]


def deliveries_of_ingress(outgoing: object) -> list[Delivery] | None:
    """The ingress record keeps full outgoing signals; keep only what identifies a delivery.
    None when the JSON is unreadable or an entry is not a signal, so that the audit counts
    the record as invalid."""
    if not isinstance(outgoing, str):
        return None
    try:
        # Parsed as the bus reads it, in either of its formats (shared.bus.deliveries).
        signals = decode_signals(outgoing)
    except CorruptRecord:
        return None
    # What the audit row of the round that wrote the record would say it caused.
    return [dict(delivery) for delivery in caused_by(signals)]


def ingress_row(table: str, partition_key: str, properties: Mapping[str, object]) -> Row:
    """One ingress record (PartitionKey = the client's idempotency key, RowKey ``ingress``).
    A record whose format this version does not read (newer, or not a version at all) lists
    no deliveries, so that the audit counts it as invalid rather than guess what it says."""
    properties = _joined(properties)
    try:
        property_version(properties, f"ingress record {partition_key!r}")
        deliveries = deliveries_of_ingress(properties.get("outgoing"))
    except (NewerVersion, CorruptRecord):
        deliveries = None
    return (
        table,
        partition_key,
        _text(properties.get("sender")),
        _text(properties.get("incoming_id")),
        _text(properties.get("type")),
        _time(properties.get("created_at")),
        deliveries,
    )
