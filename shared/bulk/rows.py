"""From one input row to the message it becomes, or the reason it is rejected.

The message type and its destination are checked once for the whole job (``Target``); each
row is then checked as the HTTP ingress checks a request body (``build_message``): its key,
its fields against the type's schema, its partition key and its size. A row that fails any
check is rejected with that check's words, never sent, never dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.bulk.keys import idempotency_key, row_key_text
from shared.bus import BusApp
from shared.bus.config import BusConfig
from shared.bus.messages import check_payload_size, checked_partition_key
from shared.errors import InvalidName, MessageTooLarge
from shared.http_ingress import (
    BadRequest,
    ClientMessage,
    build_message,
    client_type,
    destination,
)

MAX_REJECTED_ROW_CHARS = 10_000
"""A rejected row is kept in the rejects output up to this length (as JSON)."""


@dataclass(frozen=True)
class Target:
    """What every row of a job becomes: a message of ``type_name``, sent to ``to`` (a
    command) or published (an event, ``to`` None)."""

    type_name: str
    to: str | None
    fields: tuple[str, ...] = ()
    """The type's fields: what a row's body columns may be."""


def check_target(app: BusApp, type_name: str, to: str | None) -> Target:
    """The job's message type and destination, checked against the app before any row is
    read: BadRequest saying what is wrong (the ingress's words)."""
    model = client_type(app, type_name, to)
    return Target(
        type_name,
        destination(app, type_name, model, to, to_field="--to"),
        tuple(model.model_fields),
    )


def body_columns(
    target: Target, columns: Sequence[str], key_column: str, chosen: Sequence[str] = ()
) -> tuple[str, ...]:
    """The input columns that become the message's fields (``chosen``, else every column),
    checked before any row is sent: a column the input lacks, or one the type has no field
    for, would otherwise reject every row for the same reason."""
    if key_column not in columns:
        raise BadRequest(f"the input has no column {key_column!r}; columns: {list(columns)}")
    body = list(chosen) or list(columns)
    missing = [c for c in body if c not in columns]
    if missing:
        raise BadRequest(f"the input has no columns {missing}; columns: {list(columns)}")
    unknown = [c for c in body if c not in target.fields]
    if unknown:
        raise BadRequest(
            f"columns {unknown} are not fields of {target.type_name} ({list(target.fields)}): "
            "choose the body's columns with --body-columns"
        )
    return tuple(body)


@dataclass(frozen=True)
class Planned:
    """A row that passed every check: its message, destination and request digest
    (``ClientMessage``), and its idempotency key."""

    row_key: str
    key: str
    sent: ClientMessage


@dataclass(frozen=True)
class Rejected:
    row_key: str | None
    reason: str
    row: str
    """The row as JSON, cut to ``MAX_REJECTED_ROW_CHARS``."""


def plan_row(
    app: BusApp,
    config: BusConfig,
    target: Target,
    job: str,
    row: Mapping[str, Any],
    *,
    key_column: str,
    body_columns: Sequence[str],
) -> Planned | Rejected:
    """The message ``row`` becomes, or why it cannot become one."""
    raw_key = row.get(key_column)
    row_key: str | None = None
    try:
        row_key = row_key_text(raw_key)
        key = idempotency_key(job, row_key)
        # Nulls are left out, so that a field's default applies and a required field says so.
        body = {c: row[c] for c in body_columns if row.get(c) is not None}
        sent = build_message(app, target.type_name, body, target.to, config=config, to_field="--to")
        checked_partition_key(sent.message)
        check_payload_size(sent.message, config.max_payload_bytes)
    except (BadRequest, InvalidName, MessageTooLarge) as e:
        return Rejected(None if row_key is None else safe_text(row_key), str(e), row_json(row))
    return Planned(row_key, key, sent)


def row_json(row: Mapping[str, Any]) -> str:
    return safe_text(json.dumps(dict(row), default=str, ensure_ascii=False))[
        :MAX_REJECTED_ROW_CHARS
    ]


def safe_text(text: str) -> str:
    """``text`` as it is when it is valid Unicode, else with every non-ASCII character
    escaped: a lone surrogate cannot be written to any output."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("ascii", "backslashreplace").decode("ascii")
    return text
