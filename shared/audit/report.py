"""The HTML report: one self-contained file (inline CSS, and SVG plots drawn by
``shared.audit.plots``; no scripts, no links), so it can be mailed or attached to a ticket
and opened anywhere."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from shared.audit.plots import flow_links, flow_svg, latency_svg, throughput_svg
from shared.audit.summary import FAIL, PASS, AuditSummary

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1000px}
h1{margin-bottom:.2em} table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.pass{color:#2e7d32} .fail{color:#c62828} .warn{color:#e65100} svg{max-width:100%;height:auto}
.bad{color:#c62828;font-weight:bold} code{font-size:90%} .next li{margin:.3em 0}
"""


def _fmt(value: float) -> str:
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _dropped_table(summary: AuditSummary, count: Callable[[int], str]) -> str:
    """Events published to topics with no subscriber: not deliveries, so not in the
    invariants, but events of the user's that reached nobody."""
    if not summary.dropped:
        return ""
    rows = [
        [
            escape(d.topic),
            count(d.dropped),
            escape(d.first_dropped_at or "unknown"),
            escape(d.last_dropped_at or "unknown"),
            escape("unknown" if d.takers is None else ", ".join(d.takers) or "none"),
        ]
        for d in summary.dropped
    ]
    header = ["topic", "events dropped", "first", "last", "endpoints that take them"]
    return "<h2>Events dropped for want of a subscriber</h2>" + _table(header, rows)


def render_html(summary: AuditSummary) -> str:
    inv = summary.invariants
    verdict_class = {FAIL: "fail", PASS: "pass"}.get(summary.verdict, "warn")

    def count(n: int) -> str:
        return f'<span class="bad">{n:,}</span>' if n else "0"

    checks = _table(
        ["check", "found"],
        [
            ["duplicate processings (must be 0)", count(inv.duplicates)],
            [f"lost messages (older than {summary.lost_after_seconds:g} s)", count(inv.lost)],
            ["ghost messages (processed, never sent)", count(inv.ghosts)],
            ["invalid rows", count(inv.invalid_rows)],
            ["in flight (sent recently, not yet processed)", f"{summary.in_flight:,}"],
            ["in poison queues (parked, waiting for a replay)", count(summary.poisoned)],
            [
                "unverifiable poison messages (cover no delivery; see the sample)",
                count(summary.unverifiable_poison),
            ],
            *(
                [f"poison queue {escape(queue)} cut at the cap: messages not read", count(n)]
                for queue, n in sorted(summary.poison_cut.items())
            ),
        ],
    )
    dropped = _dropped_table(summary, count)
    steps = "".join(f"<li>{escape(step)}</li>" for step in summary.next_steps)
    latency = _table(
        ["endpoint", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms"],
        [
            [
                escape(e.endpoint),
                f"{e.count:,}",
                *(_fmt(v) for v in (e.mean_ms, e.p50_ms, e.p90_ms, e.p99_ms, e.max_ms)),
            ]
            for e in summary.latency
        ],
    )
    numbers = {
        (sender, destination): n
        for n, (sender, destination, _) in enumerate(flow_links(summary.flow), start=1)
    }
    flow = _table(
        [
            *("#", "sender", "destination", "type", "sent", "processed"),
            *("lost", "ghosts", "duplicates", "poisoned"),
        ],
        [
            [
                str(numbers[(e.sender, e.destination)]),
                escape(e.sender),
                escape(e.destination),
                escape(e.message_type),
                f"{e.sent:,}",
                f"{e.processed:,}",
                count(e.lost),
                count(e.ghost),
                count(e.duplicate),
                count(e.poisoned),
            ]
            for e in summary.flow
        ],
    )
    samples = "".join(
        f"<h3>{escape(kind)} (first {len(rows)})</h3>"
        + _table(
            list(rows[0]),
            [[escape(str(v)) for v in r.values()] for r in rows],
        )
        for kind, rows in summary.samples.items()
        if rows
    )
    timings = ", ".join(f"{escape(k)} {v:.1f} s" for k, v in summary.timings.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Bus audit: {summary.verdict}</title>
<style>{_CSS}</style></head><body>
<h1>Bus audit: <span class="{verdict_class}">{summary.verdict}</span></h1>
<p>As of {escape(summary.as_of)}: {summary.audit_rows:,} audit rows and
{summary.ingress_rows:,} ingress records; {summary.sent:,} deliveries sent,
{summary.processed:,} processed.</p>
<h2>Next</h2><ul class="next">{steps}</ul>
<h2>Invariants</h2>{checks}{samples}{dropped}
<h2>Latency (sent to committed)</h2>{latency}{latency_svg(summary.histogram)}
<h2>Throughput</h2>{throughput_svg(summary.throughput, summary.throughput_bucket_seconds)}
<h2>Message flow</h2>{flow_svg(summary.flow)}
<p>Numbers on the arrows key into the first column below; red: something went wrong.</p>
{flow}
<p><small>Stage times: {timings}</small></p>
</body></html>
"""
