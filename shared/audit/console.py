"""The console view of an audit: progress lines on stderr, the summary on stdout."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from shared.audit.summary import AuditSummary


class ProgressPrinter:
    """Prints each stage with the time since the run started, so a long audit shows life."""

    def __init__(self, stream: TextIO = sys.stderr, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.started
            print(f"  {elapsed:7.1f}s  {message}", file=self.stream, flush=True)


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
        "",
        f"  {'endpoint':<20}{'count':>10}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'max ms':>10}",
    ]
    for e in summary.latency:
        lines.append(
            f"  {e.endpoint:<20}{e.count:>10,}{e.p50_ms:>10.1f}{e.p90_ms:>10.1f}"
            f"{e.p99_ms:>10.1f}{e.max_ms:>10.1f}"
        )
    lines.append("")
    lines.append("  flow (sender -> destination: type sent/processed)")
    for f in summary.flow:
        trouble = "".join(
            f" {name}={getattr(f, name)}"
            for name in ("lost", "ghost", "duplicate")
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
    lines.append(summary.one_line())
    return "\n".join(lines)
