"""What an audit run found, as plain data: the JSON summary, the report and the console all
render this one object. No pyspark here."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SAMPLE_LIMIT = 20
"""Offending deliveries listed by key in the summary; the counts are always complete."""


@dataclass(frozen=True)
class Invariants:
    duplicates: int
    """Deliveries processed more than once (NoDuplicatedProcessing)."""
    lost: int
    """Deliveries sent before the threshold and never processed (NoLostMessages)."""
    ghosts: int
    """Deliveries processed that nobody sent (NoGhostMessages)."""
    invalid_rows: int
    """Rows the audit cannot read: it then cannot vouch for exactly-once either."""

    @property
    def violated(self) -> bool:
        return any((self.duplicates, self.lost, self.ghosts, self.invalid_rows))


@dataclass(frozen=True)
class DroppedEvents:
    """Events published to a topic that had no subscriber (``shared.audit.dropped``)."""

    topic: str
    dropped: int
    first_dropped_at: str | None
    """ISO-8601 UTC; None: unknown (a record from before times were kept, or damaged)."""
    last_dropped_at: str | None
    takers: list[str] | None = None
    """The app's endpoints that take these events, so ``bus subscribe`` accepts them; None:
    the audited app is not known."""


PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


def verdict_of(invariants: Invariants, dropped: list[DroppedEvents]) -> str:
    """FAIL when an invariant is violated (the bus broke its promise); WARN when every
    delivery was processed exactly once but events were dropped for want of a subscriber
    (the user's events reached nobody, through the app's subscriptions, not the bus); PASS."""
    if invariants.violated:
        return FAIL
    return WARN if dropped else PASS


@dataclass(frozen=True)
class EndpointLatency:
    endpoint: str
    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class HistogramBucket:
    endpoint: str
    lower_ms: float
    upper_ms: float
    count: int


@dataclass(frozen=True)
class ThroughputPoint:
    bucket_start: str
    """ISO-8601 UTC."""
    endpoint: str
    count: int


@dataclass(frozen=True)
class FlowEdge:
    sender: str
    destination: str
    message_type: str
    sent: int
    processed: int
    duplicate: int
    lost: int
    in_flight: int
    ghost: int
    poisoned: int = 0


@dataclass
class AuditSummary:
    verdict: str
    as_of: str
    lost_after_seconds: float
    audit_rows: int
    ingress_rows: int
    sent: int
    """Distinct deliveries sent (by clients and by handlers)."""
    processed: int
    """Distinct deliveries with at least one audit row."""
    in_flight: int
    invariants: Invariants
    poisoned: int = 0
    """Deliveries not processed that wait in a poison queue: neither lost nor in flight."""
    poison_messages: dict[str, int] = field(default_factory=dict)
    """Messages read in each poison queue (some may name deliveries processed since, or
    none)."""
    unverifiable_poison: int = 0
    """Poison messages that cover no delivery: no parseable signal, a wrapper that disagrees
    with its signal, or a token naming no delivery sent to that endpoint. They never turn a
    lost delivery into a poisoned one."""
    poison_unverifiable: dict[str, int] = field(default_factory=dict)
    """``unverifiable_poison`` per poison queue (queues with none left out)."""
    poison_cut: dict[str, int] = field(default_factory=dict)
    """Poison queues the audit did not read to their end (it stopped at its cap, or another
    reader held some messages hidden), with about how many of their messages it did not read
    (deliveries parked among those then show as lost)."""
    dropped: list[DroppedEvents] = field(default_factory=list)
    """Per topic, events dropped for want of a subscriber: the user's events reached nobody
    (not a violation of exactly-once: no delivery was made; the verdict is then WARN)."""
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    latency: list[EndpointLatency] = field(default_factory=list)
    histogram: list[HistogramBucket] = field(default_factory=list)
    throughput_bucket_seconds: int = 60
    throughput: list[ThroughputPoint] = field(default_factory=list)
    flow: list[FlowEdge] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each stage of the run."""
    next_steps: list[str] = field(default_factory=list)
    """What the operator does next, most urgent first (``shared.audit.next_steps``)."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Audit rows by outcome, those that occur: ``cancelled`` (scheduled messages cancelled
    before they were delivered) and ``saga_not_found`` (a saga's messages that found no
    instance). Each is its message's one processing, counted in ``processed`` too."""

    @property
    def dropped_events(self) -> int:
        return sum(d.dropped for d in self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)

    def one_line(self) -> str:
        inv = self.invariants
        return (
            f"audit: sent={self.sent} processed={self.processed} duplicates={inv.duplicates} "
            f"lost={inv.lost} ghosts={inv.ghosts} invalid={inv.invalid_rows} "
            f"in_flight={self.in_flight} poisoned={self.poisoned} "
            f"unverifiable_poison={self.unverifiable_poison}"
            + (f" poison_cut={sum(self.poison_cut.values())}" if self.poison_cut else "")
            + (f" dropped={self.dropped_events}" if self.dropped else "")
            + "".join(f" {outcome}={n}" for outcome, n in sorted(self.outcomes.items()))
            + f" verdict={self.verdict}"
        )
