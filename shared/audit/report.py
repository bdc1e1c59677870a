"""The HTML report: one self-contained file (inline CSS and SVG drawn here, no scripts, no
links), so it can be mailed or attached to a ticket and opened anywhere."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from html import escape

from shared.audit.summary import AuditSummary, FlowEdge, HistogramBucket, ThroughputPoint

WIDTH, HEIGHT = 760, 260
MARGIN = 48
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
BAD = "#c62828"

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:960px}
h1{margin-bottom:.2em} table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.pass{color:#2e7d32} .fail{color:#c62828} svg{background:#fcfcfc;border:1px solid #ddd}
.bad{color:#c62828;font-weight:bold} code{font-size:90%}
"""


def _fmt(value: float) -> str:
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _axes(x_label: str, y_label: str, y_max: float) -> str:
    bottom, right = HEIGHT - MARGIN, WIDTH - 10
    parts = [
        f'<line x1="{MARGIN}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>',
        f'<line x1="{MARGIN}" y1="10" x2="{MARGIN}" y2="{bottom}" stroke="#888"/>',
        f'<text x="{(MARGIN + right) / 2}" y="{HEIGHT - 8}" text-anchor="middle" '
        f'font-size="12">{escape(x_label)}</text>',
        f'<text x="12" y="{HEIGHT / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 12 {HEIGHT / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        value = y_max * i / 4
        y = bottom - (bottom - 10) * i / 4
        parts.append(
            f'<text x="{MARGIN - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
            f"{_fmt(value)}</text>"
        )
    return "".join(parts)


def _legend(names: list[str]) -> str:
    return "".join(
        f'<rect x="{MARGIN + 10 + 120 * i}" y="12" width="10" height="10" '
        f'fill="{PALETTE[i % len(PALETTE)]}"/>'
        f'<text x="{MARGIN + 24 + 120 * i}" y="21" font-size="11">{escape(n)}</text>'
        for i, n in enumerate(names)
    )


def latency_svg(buckets: list[HistogramBucket]) -> str:
    """Stacked bars per endpoint over logarithmic latency buckets."""
    if not buckets:
        return "<p>No latencies.</p>"
    endpoints = sorted({b.endpoint for b in buckets})
    all_bounds = sorted({(b.lower_ms, b.upper_ms) for b in buckets})
    counts: dict[tuple[float, float], dict[str, int]] = defaultdict(dict)
    for b in buckets:
        counts[(b.lower_ms, b.upper_ms)][b.endpoint] = b.count
    y_max = max(sum(c.values()) for c in counts.values())
    plot_w, bottom = WIDTH - 10 - MARGIN, HEIGHT - MARGIN
    bar_w = plot_w / len(all_bounds)
    parts = [_axes("latency (ms, log scale)", "processings", y_max), _legend(endpoints)]
    for i, bound in enumerate(all_bounds):
        x = MARGIN + i * bar_w
        y = float(bottom)
        for j, endpoint in enumerate(endpoints):
            height = (bottom - 10) * counts[bound].get(endpoint, 0) / y_max
            y -= height
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                f'height="{height:.1f}" fill="{PALETTE[j % len(PALETTE)]}">'
                f"<title>{escape(endpoint)}: {counts[bound].get(endpoint, 0)} in "
                f"[{_fmt(bound[0])}, {_fmt(bound[1])}) ms</title></rect>"
            )
        if i % max(1, len(all_bounds) // 8) == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{bottom + 14}" font-size="10">{_fmt(bound[0])}</text>'
            )
    return f'<svg width="{WIDTH}" height="{HEIGHT}">{"".join(parts)}</svg>'


def throughput_svg(points: list[ThroughputPoint], bucket_seconds: int) -> str:
    """One line per endpoint: processings per second, averaged over each bucket."""
    if not points:
        return "<p>No processings.</p>"
    starts = sorted({p.bucket_start for p in points})
    index = {s: i for i, s in enumerate(starts)}
    endpoints = sorted({p.endpoint for p in points})
    series: dict[str, list[float]] = {e: [0.0] * len(starts) for e in endpoints}
    for p in points:
        series[p.endpoint][index[p.bucket_start]] = p.count / bucket_seconds
    y_max = max(max(v) for v in series.values()) or 1.0
    plot_w, bottom = WIDTH - 10 - MARGIN, HEIGHT - MARGIN
    step = plot_w / max(len(starts) - 1, 1)
    parts = [_axes(f"time (UTC, {bucket_seconds} s buckets)", "messages/s", y_max)]
    parts.append(_legend(endpoints))
    for j, endpoint in enumerate(endpoints):
        coords = " ".join(
            f"{MARGIN + i * step:.1f},{bottom - (bottom - 10) * v / y_max:.1f}"
            for i, v in enumerate(series[endpoint])
        )
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke-width="1.5" '
            f'stroke="{PALETTE[j % len(PALETTE)]}"/>'
        )
    for i in (0, len(starts) - 1):
        label = datetime.fromisoformat(starts[i]).strftime("%Y-%m-%d %H:%M:%S")
        anchor = "start" if i == 0 else "end"
        parts.append(
            f'<text x="{MARGIN + i * step:.1f}" y="{bottom + 14}" font-size="10" '
            f'text-anchor="{anchor}">{label}</text>'
        )
    return f'<svg width="{WIDTH}" height="{HEIGHT}">{"".join(parts)}</svg>'


def _layers(edges: list[FlowEdge]) -> dict[str, int]:
    """Column of each node: senders nobody sends to first, then by shortest hop count."""
    nodes = {e.sender for e in edges} | {e.destination for e in edges}
    targets = {e.destination for e in edges if e.sender != e.destination}
    depth = {n: 0 for n in nodes - targets} or {min(nodes): 0}
    frontier = list(depth)
    while frontier:
        nxt = []
        for node in frontier:
            for e in edges:
                if e.sender == node and e.destination not in depth:
                    depth[e.destination] = depth[node] + 1
                    nxt.append(e.destination)
        frontier = nxt
    for n in sorted(nodes - set(depth)):  # cycles unreachable from a source
        depth[n] = max(depth.values(), default=0) + 1
    return depth


def flow_svg(edges: list[FlowEdge]) -> str:
    """Endpoints as boxes in columns by distance from the clients; one arrow per sender and
    destination, labelled with the message types and counts, red where anything went wrong."""
    if not edges:
        return "<p>No messages.</p>"
    depth = _layers(edges)
    columns: dict[int, list[str]] = defaultdict(list)
    for node in sorted(depth):
        columns[depth[node]].append(node)
    rows = max(len(c) for c in columns.values())
    height = max(160, 90 * rows + 40)
    col_w = (WIDTH - 160) / max(len(columns) - 1, 1)
    pos: dict[str, tuple[float, float]] = {}
    for col, names in columns.items():
        for i, name in enumerate(names):
            pos[name] = (20 + col * col_w, 30 + (height - 60) * (i + 0.5) / len(names))
    grouped: dict[tuple[str, str], list[FlowEdge]] = defaultdict(list)
    for e in edges:
        grouped[(e.sender, e.destination)].append(e)
    parts = [
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#555"/></marker></defs>'
    ]
    for (sender, destination), group in sorted(grouped.items()):
        (x1, y1), (x2, y2) = pos[sender], pos[destination]
        start, end = (x1 + 120, y1), (x2, y2)
        bend = 40 if x2 <= x1 else 0
        mid_x, mid_y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2 - bend
        bad = any(e.lost or e.ghost or e.duplicate for e in group)
        colour = BAD if bad else "#555"
        parts.append(
            f'<path d="M{start[0]:.0f},{start[1]:.0f} Q{mid_x:.0f},{mid_y - bend:.0f} '
            f'{end[0]:.0f},{end[1]:.0f}" fill="none" stroke="{colour}" stroke-width="1.5" '
            f'marker-end="url(#arrow)"/>'
        )
        for k, e in enumerate(group):
            trouble = ", ".join(
                f"{n} {getattr(e, n)}" for n in ("lost", "ghost", "duplicate") if getattr(e, n)
            )
            label = f"{e.message_type} x{max(e.sent, e.processed)}" + (
                f" ({trouble})" if trouble else ""
            )
            parts.append(
                f'<text x="{mid_x:.0f}" y="{mid_y - 4 + 12 * k:.0f}" font-size="10" '
                f'text-anchor="middle" fill="{BAD if trouble else "#333"}">{escape(label)}</text>'
            )
    for name, (x, y) in pos.items():
        parts.append(
            f'<rect x="{x:.0f}" y="{y - 14:.0f}" width="120" height="28" rx="6" '
            f'fill="#e8f0fe" stroke="#4a6fa5"/><text x="{x + 60:.0f}" y="{y + 4:.0f}" '
            f'font-size="12" text-anchor="middle">{escape(name)}</text>'
        )
    return f'<svg width="{WIDTH}" height="{height}">{"".join(parts)}</svg>'


def render_html(summary: AuditSummary) -> str:
    inv = summary.invariants
    verdict_class = "fail" if summary.verdict == "FAIL" else "pass"

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
        ],
    )
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
    flow = _table(
        ["sender", "destination", "type", "sent", "processed", "lost", "ghosts", "duplicates"],
        [
            [
                escape(e.sender),
                escape(e.destination),
                escape(e.message_type),
                f"{e.sent:,}",
                f"{e.processed:,}",
                count(e.lost),
                count(e.ghost),
                count(e.duplicate),
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
<h2>Invariants</h2>{checks}{samples}
<h2>Latency (sent to committed)</h2>{latency}{latency_svg(summary.histogram)}
<h2>Throughput</h2>{throughput_svg(summary.throughput, summary.throughput_bucket_seconds)}
<h2>Message flow</h2>{flow_svg(summary.flow)}{flow}
<p><small>Stage times: {timings}</small></p>
</body></html>
"""
