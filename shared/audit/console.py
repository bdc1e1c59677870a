"""The console view of an audit: the summary on stdout (progress lines go to stderr through
``shared.terminal.StageLog``)."""

from __future__ import annotations

from shared.audit.summary import AuditSummary, EndpointLatency
from shared.terminal import table


def render_console(summary: AuditSummary) -> str:
    inv = summary.invariants
    lines = [
        f"audit rows {summary.audit_rows:,}, ingress records {summary.ingress_rows:,}; "
        f"lost threshold {summary.lost_after_seconds:g} s before {summary.as_of}",
        "",
        f"  duplicate processings  {inv.duplicates:>10,}  (must be 0)",
        f"  lost messages          {inv.lost:>10,}  (must be 0)",
        f"  ghost messages         {inv.ghosts:>10,}  (must be 0)",
        f"  invalid rows           {inv.invalid_rows:>10,}  (must be 0)",
        f"  in flight              {summary.in_flight:>10,}",
        f"  in poison queues       {summary.poisoned:>10,}",
        f"  unverifiable poison    {summary.unverifiable_poison:>10,}  (cover nothing)",
        *(
            f"  poison queue cut       {queue}: about {n:,} messages not read"
            for queue, n in sorted(summary.poison_cut.items())
        ),
        *(
            f"  dropped, no subscriber {d.dropped:>10,}  topic {d.topic}, first "
            f"{d.first_dropped_at or 'unknown'}, last {d.last_dropped_at or 'unknown'}"
            for d in summary.dropped
        ),
        "",
    ]
    timings = ("p50 ms", "p90 ms", "p99 ms", "max ms")
    latency = table(
        ("endpoint", "count", *timings),
        (
            (e.endpoint, f"{e.count:,}", *(f"{ms:.1f}" for ms in _latency_ms(e)))
            for e in summary.latency
        ),
        right=("count", *timings),
    )
    lines.extend(f"  {line}" for line in latency.splitlines())
    lines.append("")
    lines.append("  flow (sender -> destination: type sent/processed)")
    for f in summary.flow:
        trouble = "".join(
            f" {name}={getattr(f, name)}"
            for name in ("lost", "ghost", "duplicate", "poisoned")
            if getattr(f, name)
        )
        lines.append(
            f"    {f.sender} -> {f.destination}: {f.message_type} {f.sent}/{f.processed}{trouble}"
        )
    for kind, rows in summary.samples.items():
        lines.append("")
        lines.append(f"  {kind} (first {len(rows)}):")
        lines.extend(f"    {row}" for row in rows)
    lines.append("")
    lines.extend(f"next: {step}" for step in summary.next_steps)
    lines.append(summary.one_line())
    return "\n".join(lines)


def _latency_ms(e: EndpointLatency) -> tuple[float, ...]:
    return (e.p50_ms, e.p90_ms, e.p99_ms, e.max_ms)
