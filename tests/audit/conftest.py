"""The audit tests' Spark session (``tests.spark``: one per process, started once, as start-up
costs seconds), and helpers to build audit inputs by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.spark import spark_session

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def spark() -> Any:
    # Tiny inputs: a couple of shuffle partitions, and no code generation whose compile time
    # would dominate every query. No adaptive execution either: re-planning each query's
    # stages cost about a fifth of the Spark-only audit tests' time (docs/testing.md), and
    # without it both shuffle partitions stay apart (it merges tiny ones into one), so every
    # query still combines rows of two partitions.
    return spark_session(
        "local[2]",
        app_name="bus-audit-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.adaptive.enabled": "false",
        },
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def utc(value: datetime | None) -> datetime | None:
    """Spark hands timestamps back as naive local times; compare them in UTC."""
    return None if value is None else value.astimezone(UTC)


def caused(*deliveries: tuple[str, str, str]) -> list[dict[str, str | None]]:
    """Typed deliveries from (message id, type, destination) triples, as the readers make
    them from what the receiver writes."""
    return [{"id": i, "type": t, "destination": d} for i, t, d in deliveries]


def audit(
    endpoint: str,
    message_id: str,
    *,
    source: str = "client",
    message_type: str = "Cmd",
    sent: float = 0.0,
    processed: float = 0.1,
    sends: tuple[tuple[str, str, str], ...] = (),
    partition: str = "p1",
    table: str | None = None,
    mode: str = "token",
    outcome: str | None = None,
) -> tuple[object, ...]:
    """An audit row in the column order of ``shared.audit.rows.AUDIT_COLUMNS``."""
    return (
        table or endpoint,
        partition,
        endpoint,
        message_id,
        message_type,
        source,
        "corr",
        None,
        mode,
        at(sent),
        at(processed),
        caused(*sends),
        outcome,
    )


def ingress(
    key: str, *sends: tuple[str, str, str], sender: str = "client", created: float = 0.0
) -> tuple[object, ...]:
    """An ingress record in the column order of ``shared.audit.rows.INGRESS_COLUMNS``."""
    return (
        "ingress",
        key,
        sender,
        f"in-{key}",
        sends[0][1] if sends else "Cmd",
        at(created),
        caused(*sends),
    )
