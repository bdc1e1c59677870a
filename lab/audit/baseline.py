"""The same checks in one plain Python process, for the bench to compare Spark against.

It streams the export's Parquet files in record batches (pyarrow) and makes a single pass
over the audit rows and one over the ingress records, keeping one dictionary entry per
delivery: that dictionary is what a single process cannot avoid, and what makes its memory
grow with the data. Each entry is one packed int (processing count, a 'sent' bit and the
flow-graph edge), the most compact form plain Python offers.

Results match ``shared.audit.compute.run_audit`` (counts exactly; percentiles by nearest
rank, where Spark's are the middle of the fine latency bucket holding that rank: within 0.14%
of the value, ``shared.audit.latency``).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from shared.audit.checks import HISTOGRAM_STEPS_PER_DOUBLING
from shared.bus.session_records import SESSION_MODE

_COUNT_BITS = 20
_COUNT_MASK = (1 << _COUNT_BITS) - 1
_SENT = 1 << _COUNT_BITS
_EDGE_SHIFT = _COUNT_BITS + 1
BATCH_ROWS = 65_536


@dataclass
class BaselineResult:
    audit_rows: int = 0
    ingress_rows: int = 0
    invalid_rows: int = 0
    sent: int = 0
    processed: int = 0
    duplicates: int = 0
    lost: int = 0
    in_flight: int = 0
    ghosts: int = 0
    latency: dict[str, dict[str, float]] = field(default_factory=dict)
    histogram: dict[tuple[str, int], int] = field(default_factory=dict)
    throughput_per_second: dict[tuple[int, str], int] = field(default_factory=dict)
    flow: dict[tuple[str, str, str], dict[str, int]] = field(default_factory=dict)


def _batches(folder: Path, columns: list[str]) -> Iterator[list[list[Any]]]:
    """Columns as Python lists, one record batch at a time; timestamps as epoch µs ints."""
    dataset = ds.dataset(str(folder), format="parquet")
    for batch in dataset.to_batches(columns=columns, batch_size=BATCH_ROWS):
        out = []
        for column in batch.columns:
            if pa.types.is_timestamp(column.type):  # Spark writes ns (INT96), exports µs
                column = pc.cast(column, pa.timestamp("us", column.type.tz), safe=False)
                column = pc.cast(column, pa.int64())
            out.append(column.to_pylist())
        yield out


class _Edges:
    """Small ids for (sender, destination, type) so that entries stay single ints."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str, str], int] = {}
        self.names: list[tuple[str, str, str]] = []

    def id(self, key: tuple[str, str, str]) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.names)
            self.names.append(key)
        return found


def audit_files(path: Path, *, as_of: datetime, lost_after: timedelta) -> BaselineResult:
    result = BaselineResult()
    edges = _Edges()
    deliveries: dict[str, dict[str, int]] = defaultdict(dict)
    pending: dict[tuple[str, str], tuple[int, int]] = {}  # sent, not processed (yet)
    counts: dict[str, Counter[int]] = defaultdict(Counter)  # per edge id
    latencies: dict[str, array[float]] = defaultdict(lambda: array("d"))
    per_second: Counter[tuple[int, str]] = Counter()

    def send(sender: str, message: Any, sent_at: int) -> None:
        destination, message_id = message["destination"], message["id"]
        edge = edges.id((sender, destination, message["type"]))
        at_destination = deliveries[destination]
        value = at_destination.get(message_id)
        if value is None:
            at_destination[message_id] = _SENT | (edge << _EDGE_SHIFT)
            pending[(destination, message_id)] = (sent_at, edge)
            counts["sent"][edge] += 1
        elif not value & _SENT:
            at_destination[message_id] = value | _SENT
            counts["sent"][value >> _EDGE_SHIFT] += 1
        elif (destination, message_id) in pending:  # sent twice: keep the earliest time
            first, first_edge = pending[(destination, message_id)]
            pending[(destination, message_id)] = (min(first, sent_at), first_edge)

    def parse(messages: list[Any] | None) -> list[Any] | None:
        """The typed list as pyarrow hands it out (dicts), or None when it is unusable."""
        if messages is None or not all(m["id"] and m["destination"] for m in messages):
            return None
        return messages

    audit_columns = [
        "endpoint", "message_id", "message_type", "source", "sent_at", "processed_at", "caused",
        "mode",
    ]  # fmt: skip
    for (
        endpoint_col,
        id_col,
        type_col,
        source_col,
        sent_col,
        done_col,
        caused_col,
        mode_col,
    ) in _batches(path / "audit", audit_columns):
        for endpoint, message_id, message_type, source, sent_at, done_at, caused, mode in zip(
            endpoint_col,
            id_col,
            type_col,
            source_col,
            sent_col,
            done_col,
            caused_col,
            mode_col,
            strict=True,
        ):
            result.audit_rows += 1
            messages = parse(caused)
            if endpoint is None or message_id is None or sent_at is None or done_at is None:
                result.invalid_rows += 1
                continue
            if messages is None:
                result.invalid_rows += 1
            if mode == SESSION_MODE:  # a session's commit: it sends, it is no processing
                for message in messages or ():
                    send(endpoint, message, done_at)
                continue
            at_endpoint = deliveries[endpoint]
            value = at_endpoint.get(message_id)
            if value is None:
                edge = edges.id((source, endpoint, message_type))
                at_endpoint[message_id] = 1 | (edge << _EDGE_SHIFT)
                counts["processed"][edge] += 1
            else:
                edge = value >> _EDGE_SHIFT
                processings = (value & _COUNT_MASK) + 1
                at_endpoint[message_id] = (value & ~_COUNT_MASK) | processings
                if processings == 1:
                    counts["processed"][edge] += 1
                    pending.pop((endpoint, message_id), None)
                elif processings == 2:
                    counts["duplicate"][edge] += 1
            latencies[endpoint].append((done_at - sent_at) / 1000.0)
            per_second[(done_at // 1_000_000, endpoint)] += 1
            for message in messages or ():
                send(endpoint, message, done_at)

    ingress_columns = ["sender", "created_at", "outgoing"]
    for sender_col, created_col, outgoing_col in _batches(path / "ingress", ingress_columns):
        for sender, created_at, outgoing in zip(sender_col, created_col, outgoing_col, strict=True):
            result.ingress_rows += 1
            messages = parse(outgoing)
            if sender is None or created_at is None or messages is None:
                result.invalid_rows += 1
                continue
            for message in messages:
                send(sender, message, created_at)

    cutoff = int((as_of - lost_after).timestamp() * 1_000_000)
    for sent_at, edge in pending.values():
        counts["lost" if sent_at < cutoff else "in_flight"][edge] += 1
    for at_endpoint in deliveries.values():
        for value in at_endpoint.values():
            if not value & _SENT:
                counts["ghost"][value >> _EDGE_SHIFT] += 1

    kinds = ("sent", "processed", "duplicate", "lost", "in_flight", "ghost")
    for edge, name in enumerate(edges.names):
        result.flow[name] = {k: counts[k][edge] for k in kinds}
    result.sent = sum(counts["sent"].values())
    result.processed = sum(counts["processed"].values())
    result.duplicates = sum(counts["duplicate"].values())
    result.lost = sum(counts["lost"].values())
    result.in_flight = sum(counts["in_flight"].values())
    result.ghosts = sum(counts["ghost"].values())
    result.throughput_per_second = dict(per_second)
    for endpoint, values in latencies.items():
        ordered = sorted(values)
        result.latency[endpoint] = {
            "count": len(ordered),
            "mean_ms": math.fsum(ordered) / len(ordered),
            "p50_ms": nearest_rank(ordered, 0.5),
            "p90_ms": nearest_rank(ordered, 0.9),
            "p99_ms": nearest_rank(ordered, 0.99),
            "max_ms": ordered[-1],
        }
        for latency in ordered:
            bucket = math.floor(math.log2(max(latency, 1.0)) * HISTOGRAM_STEPS_PER_DOUBLING)
            result.histogram[(endpoint, bucket)] = result.histogram.get((endpoint, bucket), 0) + 1
    return result


def nearest_rank(ordered: list[float], p: float) -> float:
    """The smallest value with at least a fraction p of the values at or below it."""
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]
