"""``bus state ENDPOINT PARTITION``: an endpoint's rows of one partition, read, never written.

Whatever the endpoint's mode and store, its rows are read through its ``EndpointRows``
(``shared.bus.state.rows``), the one seam over Table Storage, PostgreSQL, Cosmos DB and blob
documents (a document's rows are shown one by one, as a table's): token mode's
state row, outbox records O(m) and audit rows; the entity-outbox mode's state row with its
outbox map; the processed-messages mode's rows; the state-based mode's versions and message
index (``docs/modes.md``). A saga's partition is an instance: its status, what started it
and its pending timeouts are shown first. Properties holding JSON are shown as JSON; every
line is escaped (``shown``), as the rows hold what senders wrote. A partition without rows
exits 1.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.records import STATE_ROW
from shared.bus.saga_view import instance_view
from shared.bus.state.rows import EndpointRows
from shared.cli.commands import EXIT_FAILED, EXIT_OK, account_json, print_json, say
from shared.cli.poison_commands import check_endpoints
from shared.logsafe import shown
from shared.runtime import Worker
from shared.stores.names import check_key
from shared.stores.table import Entity

ROW_LIMIT = 1000
"""Rows shown by default; ``--limit`` shows more (a partition of the processed-messages mode
grows with every message)."""


async def state_command(
    worker: Worker, endpoint: str, partition_key: str, *, as_json: bool, limit: int = ROW_LIMIT
) -> int:
    """Print the rows of ``partition_key`` in ``endpoint``'s store (at most ``limit``)."""
    check_endpoints(worker, [endpoint])
    check_key("PartitionKey", partition_key)
    declared = worker.app.endpoints[endpoint]
    rows = worker.bus().endpoint_state(endpoint).rows()
    found, more = await _partition(rows, partition_key, limit)
    where = f"partition {shown(partition_key, 200)!r} of endpoint {endpoint} ({declared.store})"
    if not found:
        say(f"no rows in {where}")
        return EXIT_FAILED
    described = [_row(entity, declared.mode) for entity in found]
    instance = _saga_instance(found, where) if declared.saga is not None else None
    if as_json:
        print_json(
            {
                "endpoint": endpoint,
                "mode": declared.mode,
                "store": declared.store,
                "partition_key": partition_key,
                "rows": described,
                "more": more,
                **({} if declared.saga is None else {"saga_instance": instance}),
                "account": account_json(worker),
            }
        )
        return EXIT_OK
    lines = [f"{where}, mode {declared.mode}: {len(found)} rows" + (" (more: --limit)" * more)]
    if declared.saga is not None:
        lines += _instance_lines(instance)
    for row in described:
        lines.append(f"row {shown(row['row_key'], 1100)}  version {shown(row['version'], 100)}")
        for name, value in row["properties"].items():
            lines += _property_lines(name, value)
    say("\n".join(lines))
    return EXIT_OK


async def _partition(
    rows: EndpointRows, partition_key: str, limit: int
) -> tuple[list[Entity], bool]:
    """Up to ``limit`` rows of the partition in row-key order, and whether more follow."""
    found: list[Entity] = []
    continuation: str | None = None
    while True:
        page, continuation = await rows.page(
            partition_key=partition_key,
            page_size=min(1000, limit + 1 - len(found)),
            continuation=continuation,
        )
        found += page
        if continuation is None or len(found) > limit:
            return found[:limit], len(found) > limit or continuation is not None


def _saga_instance(found: list[Entity], where: str) -> dict[str, Any] | None:
    """The saga instance the partition holds (``shared.bus.saga_view``)."""
    return instance_view(next((e for e in found if e.row_key == STATE_ROW), None), where)


def _instance_lines(instance: dict[str, Any] | None) -> list[str]:
    if instance is None:
        return ["saga instance: none (never started, or completed and retired)"]
    if "unreadable" in instance:
        return [f"saga instance: unreadable ({instance['unreadable']})"]
    status = instance["status"]
    if instance["completed_at"]:
        status += f" at {instance['completed_at']}"
    lines = [
        f"saga instance: {status}, started by message {shown(instance['started_by'] or '-')}",
        f"  pending timeouts: {len(instance['pending_timeouts'])}",
    ]
    for timeout in instance["pending_timeouts"]:
        due = timeout["due"] or "at once"
        lines.append(f"    {shown(timeout['type'], 200)} {timeout['message_id']} due {due}")
    return lines


def _row(entity: Entity, mode: str) -> dict[str, Any]:
    properties = {name: _value(value) for name, value in entity.properties.items()}
    if mode == "entity_outbox" and entity.row_key == STATE_ROW:
        try:
            stored = StateEntity.from_entity(entity)
        except (KeyError, ValueError, TypeError) as e:
            properties["unreadable outbox map"] = f"{type(e).__name__}: {e}"
        else:
            properties = {
                "type": stored.type_name,
                "data": _value(stored.data),
                "outbox": {m: entry.to_json() for m, entry in stored.entries.items()},
            }
    return {"row_key": entity.row_key, "version": entity.etag, "properties": properties}


def _value(value: object) -> object:
    """A stored property as JSON shows it: JSON text parsed, times in ISO 8601, bytes in
    base64."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _property_lines(name: str, value: object) -> list[str]:
    if not isinstance(value, dict | list):
        return [f"  {shown(name, 200)}: {shown(value, 4000)}"]
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str).splitlines()
    return [f"  {shown(name, 200)}:", *(f"    {shown(line, 1000)}" for line in text)]
