"""The report's plots, drawn with matplotlib as inline SVG: no scripts, no external links, so
the report stays one self-contained file.

- latency: stacked bars per endpoint on a real logarithmic axis, each bar spanning its
  bucket's bounds, so empty buckets show as gaps of their true width;
- throughput: processings per bucket on a real time axis, every bucket from the first to the
  last drawn (idle ones at zero), so idle gaps show;
- flow: endpoints in columns by distance from the clients, one numbered arrow per sender and
  destination (the numbers key into the flow table, so labels never overlap).

Counts get integer ticks, and legends sit outside the plotting area so they hide nothing.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import matplotlib as mpl
from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.ticker import LogLocator, MaxNLocator

from shared.audit.summary import FlowEdge, HistogramBucket, ThroughputPoint

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
BAD = "#c62828"
WIDTH_IN, HEIGHT_IN = 9.0, 3.4
FIRST_BUCKET_FLOOR_MS = 2 ** (-1 / 4)
"""Bucket 0 holds everything under 2**(1/4) ms (clock skew included); a log axis needs a
lower edge above zero, so it is drawn from one step below."""


@contextmanager
def _svg_settings(salt: str) -> Iterator[None]:
    # Text stays text (searchable, no glyph definitions); the salt keeps generated ids stable.
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt, "font.size": 9}):
        yield


def _svg(figure: Figure, salt: str) -> str:
    buffer = io.StringIO()
    with _svg_settings(salt):
        figure.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    text = text[text.index("<svg") :]  # no XML prolog or doctype inside HTML
    # Every id and every reference to one gets the plot's name in front: the page holds
    # several SVGs and an id must be unique in it.
    text = text.replace(' id="', f' id="{salt}-')
    return text.replace('href="#', f'href="#{salt}-').replace("url(#", f"url(#{salt}-")


def _legend_outside(ax: Axes) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, borderaxespad=0)


def latency_svg(buckets: list[HistogramBucket]) -> str:
    """Stacked bars per endpoint over the logarithmic latency buckets."""
    if not buckets:
        return "<p>No latencies.</p>"
    endpoints = sorted({b.endpoint for b in buckets})
    counts: dict[tuple[float, float], dict[str, int]] = defaultdict(dict)
    for b in buckets:
        counts[(b.lower_ms, b.upper_ms)][b.endpoint] = b.count
    bounds = sorted(counts)
    lefts = [lower if lower > 0 else FIRST_BUCKET_FLOOR_MS for lower, _ in bounds]
    widths = [upper - left for (_, upper), left in zip(bounds, lefts, strict=True)]
    with _svg_settings("latency"):
        figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
        ax = figure.add_subplot()
        bottom = [0] * len(bounds)
        for i, endpoint in enumerate(endpoints):
            heights = [counts[b].get(endpoint, 0) for b in bounds]
            ax.bar(
                lefts,
                heights,
                width=widths,
                bottom=bottom,
                align="edge",
                color=PALETTE[i % len(PALETTE)],
                edgecolor="white",
                linewidth=0.3,
                label=endpoint,
            )
            bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.set_xlim(min(lefts) / 1.5, max(b[1] for b in bounds) * 1.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("latency, sent to committed (ms, log scale; first bar: under 1.19 ms)")
        ax.set_ylabel("processings")
        ax.grid(axis="y", alpha=0.3)
        _legend_outside(ax)
    return _svg(figure, "latency")


def _every_bucket(points: list[ThroughputPoint], bucket_seconds: int) -> list[datetime]:
    starts = sorted({datetime.fromisoformat(p.bucket_start) for p in points})
    step = timedelta(seconds=bucket_seconds)
    count = int((starts[-1] - starts[0]) / step) + 1
    return [starts[0] + i * step for i in range(count)]


def throughput_svg(points: list[ThroughputPoint], bucket_seconds: int) -> str:
    """Processings per bucket and endpoint over time, idle buckets at zero."""
    if not points:
        return "<p>No processings.</p>"
    times = _every_bucket(points, bucket_seconds)
    index = {t: i for i, t in enumerate(times)}
    endpoints = sorted({p.endpoint for p in points})
    series: dict[str, list[int]] = {e: [0] * len(times) for e in endpoints}
    for p in points:
        series[p.endpoint][index[datetime.fromisoformat(p.bucket_start)]] += p.count
    # Each value holds for its whole bucket: a step drawn to the end of the last one.
    ends = [*times, times[-1] + timedelta(seconds=bucket_seconds)]
    edges = mdates.date2num(ends)  # type: ignore[no-untyped-call]
    with _svg_settings("throughput"):
        figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
        ax = figure.add_subplot()
        for i, endpoint in enumerate(endpoints):
            values = series[endpoint]
            ax.stairs(values, edges, color=PALETTE[i % len(PALETTE)], linewidth=1.4, label=endpoint)
        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        formatter = mdates.ConciseDateFormatter(locator)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_formatter(formatter)
        ax.xaxis_date()
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        ax.set_xlabel(f"time (UTC), {bucket_seconds} s buckets")
        ax.set_ylabel(f"processings per {bucket_seconds} s")
        ax.grid(alpha=0.3)
        _legend_outside(ax)
    return _svg(figure, "throughput")


def layers(edges: list[FlowEdge]) -> dict[str, int]:
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


def flow_links(edges: list[FlowEdge]) -> list[tuple[str, str, list[FlowEdge]]]:
    """One link per (sender, destination), numbered from 1 in this order in the plot and in
    the report's flow table."""
    grouped: dict[tuple[str, str], list[FlowEdge]] = defaultdict(list)
    for e in edges:
        grouped[(e.sender, e.destination)].append(e)
    return [(s, d, group) for (s, d), group in sorted(grouped.items())]


def _troubled(group: list[FlowEdge]) -> bool:
    return any(e.lost or e.ghost or e.duplicate or e.poisoned for e in group)


LABEL_GAP_PX = 22.0
"""Link numbers closer than this (in pixels) would overlap: the next one moves along."""


def _label_point(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    rad: float,
    placed: list[tuple[float, float]],
) -> tuple[float, float]:
    """Where a link's number goes: on the drawn curve (computed in pixels, as matplotlib's
    arc3 bends it), at the first of several points along it that keeps clear of the numbers
    placed so far."""
    (px1, py1), (px2, py2) = ax.transData.transform([start, end])
    control = ((px1 + px2) / 2 + rad * (py2 - py1), (py1 + py2) / 2 - rad * (px2 - px1))
    candidates = []
    for t in (0.5, 0.35, 0.65, 0.25, 0.75, 0.42, 0.58):
        x = (1 - t) ** 2 * px1 + 2 * (1 - t) * t * control[0] + t**2 * px2
        y = (1 - t) ** 2 * py1 + 2 * (1 - t) * t * control[1] + t**2 * py2
        clearance = min((abs(x - a) + abs(y - b) for a, b in placed), default=1e9)
        candidates.append((clearance >= LABEL_GAP_PX, clearance, (x, y)))
        if clearance >= LABEL_GAP_PX:
            break
    best = next((c for c in candidates if c[0]), max(candidates, key=lambda c: c[1]))[2]
    placed.append(best)
    x, y = ax.transData.inverted().transform(best)
    return float(x), float(y)


def flow_svg(edges: list[FlowEdge]) -> str:
    """Endpoints as boxes in columns; numbered arrows, red where anything went wrong."""
    if not edges:
        return "<p>No messages.</p>"
    depth = layers(edges)
    columns: dict[int, list[str]] = defaultdict(list)
    for node in sorted(depth):
        columns[depth[node]].append(node)
    rows = max(len(c) for c in columns.values())
    pos = {
        name: (float(col), (len(names) - 1) / 2 - i)
        for col, names in columns.items()
        for i, name in enumerate(names)
    }
    box_w, box_h = 0.62, 0.34
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    with _svg_settings("flow"):
        figure = Figure(figsize=(WIDTH_IN, max(2.2, 1.1 * rows + 0.6)))
        ax = figure.add_subplot()
        ax.set_axis_off()
        ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
        ax.set_ylim(min(ys) - 0.5, max(ys) + 0.8)
        placed: list[tuple[float, float]] = []
        for number, (sender, destination, group) in enumerate(flow_links(edges), start=1):
            (x1, y1), (x2, y2) = pos[sender], pos[destination]
            colour = BAD if _troubled(group) else "#555555"
            # Backward and same-column links bend over the boxes instead of through them.
            forward = x2 > x1
            rad = 0.0 if forward else -0.45
            start = (x1 + box_w / 2, y1) if forward else (x1, y1 + box_h / 2)
            end = (x2 - box_w / 2, y2) if forward else (x2, y2 + box_h / 2)
            ax.add_patch(
                FancyArrowPatch(
                    start,
                    end,
                    arrowstyle="-|>",
                    mutation_scale=12,
                    connectionstyle=f"arc3,rad={rad}",
                    color=colour,
                    linewidth=1.3,
                    shrinkA=2,
                    shrinkB=2,
                )
            )
            ax.annotate(
                str(number),
                _label_point(ax, start, end, rad, placed),
                ha="center",
                va="center",
                fontsize=8,
                color="white",
                bbox={"boxstyle": "circle,pad=0.25", "fc": colour, "ec": "none"},
            )
        for name, (x, y) in pos.items():
            ax.add_patch(
                FancyBboxPatch(
                    (x - box_w / 2, y - box_h / 2),
                    box_w,
                    box_h,
                    boxstyle="round,pad=0.02",
                    fc="#e8f0fe",
                    ec="#4a6fa5",
                )
            )
            ax.text(x, y, name, ha="center", va="center", fontsize=9, clip_on=False)
    return _svg(figure, "flow")
