"""What ``bus status`` counts of an endpoint's deduplication records, mode by mode.

Each mode keeps its own records (``docs/modes.md``): token mode an outbox row per message
(claimed, then committed), entity-outbox mode an outbox map inside each state row, the
processed-messages mode one row per processed message, the state-based mode a message-id
index. Only what the endpoint's mode keeps is counted and shown, and for an endpoint that takes
transactional sessions, its sessions' records (``shared.bus.session_counts``, which the console
shares), and for a saga its instances and ``saga_not_found`` messages (``shared.bus.saga_counts``,
shared the same way).
"""

from __future__ import annotations

from typing import Any

from shared.bus.app import Endpoint
from shared.bus.modes.entity_outbox import StateEntity
from shared.bus.modes.processed_table import PROCESSED_PREFIX
from shared.bus.modes.state_based import INDEX_PREFIX
from shared.bus.records import STATE_ROW
from shared.bus.saga_counts import count_sagas
from shared.bus.session_counts import count_sessions
from shared.bus.state.base import EndpointState
from shared.logsafe import shown

Counts = dict[str, int | str | None]
"""Record counts by name; a saga's earliest timeout due is an ISO time (None: none)."""


async def count_records(endpoint: Endpoint[Any], state: EndpointState) -> Counts:
    """The endpoint's record counts, keyed as ``bus status --json`` reports them. ``state`` is
    where the endpoint keeps its rows, in whichever store it declares: its table,
    PostgreSQL, Cosmos DB or blob documents. Raises NotFound when what holds them (the
    table, the bus schema, the container) is missing."""
    counts: Counts = {**await _mode_records(endpoint, state)}
    if endpoint.sessions:
        counts.update((await count_sessions(state.rows())).as_status())
    if endpoint.saga is not None:
        counts.update((await count_sagas(state.rows())).as_status())
    return counts


async def _mode_records(endpoint: Endpoint[Any], state: EndpointState) -> dict[str, int]:
    if endpoint.mode == "token":
        claimed = committed = 0
        async for record in state.outbox_records():
            if record.status == "claimed":
                claimed += 1
            else:
                committed += 1
        return {"outbox_claimed": claimed, "outbox_committed": committed}
    rows = state.rows()
    if endpoint.mode == "entity_outbox":
        undispatched = entries = 0
        async for entity in rows.every(row_key=STATE_ROW):
            stored = StateEntity.from_entity(entity)
            entries += len(stored.entries)
            undispatched += sum(e.out is not None for e in stored.entries.values())
        return {"outbox_undispatched": undispatched, "outbox_entries": entries}
    prefix = PROCESSED_PREFIX if endpoint.mode == "processed_messages" else INDEX_PREFIX
    count = 0
    async for _ in rows.every(row_key_prefix=prefix):
        count += 1
    key = "processed_rows" if endpoint.mode == "processed_messages" else "indexed_messages"
    return {key: count}


def describe(counts: Counts | None) -> str:
    """One cell of the status table: the counts in words (``-`` when the table is missing)."""
    if counts is None:
        return "-"
    if "saga_instances_live" in counts:
        rest = {k: v for k, v in counts.items() if not k.startswith("saga_")}
        return f"{describe(rest)}; {_describe_saga(counts)}"
    if "sessions_waiting" in counts:
        sessions = (
            f"sessions: {counts['sessions_waiting']} waiting to be signalled, "
            f"{counts['sessions_open']} open, {counts['sessions_finished']} finished"
        )
        if counts.get("sessions_unreadable"):
            sessions += f", {counts['sessions_unreadable']} unreadable"
        rest = {k: v for k, v in counts.items() if not k.startswith("sessions_")}
        return f"{_describe_mode(rest)}; {sessions}"
    return _describe_mode(counts)


def _describe_saga(counts: Counts) -> str:
    text = (
        f"saga: {counts['saga_instances_live']} live, "
        f"{counts['saga_instances_completed']} completed, "
        f"{counts['saga_timeouts_pending']} timeouts pending"
    )
    due = counts.get("saga_next_timeout_due")
    if due is not None:
        text += f" (next due {shown(due, 40)})"
    text += f", {counts['saga_not_found']} saga_not_found"
    if counts.get("saga_unreadable"):
        text += f", {counts['saga_unreadable']} unreadable"
    return text


def _describe_mode(counts: Counts) -> str:
    if "outbox_claimed" in counts:
        return f"outbox: {counts['outbox_claimed']} open, {counts['outbox_committed']} committed"
    if "outbox_entries" in counts:
        return (
            f"outbox map: {counts['outbox_undispatched']} undispatched, "
            f"{counts['outbox_entries']} entries"
        )
    if "processed_rows" in counts:
        return f"processed rows: {counts['processed_rows']}"
    return f"message index: {counts['indexed_messages']}"
