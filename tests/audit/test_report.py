"""The HTML report: matplotlib plots as inline SVG, checked in a real headless Chromium."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from lab.chromium import CHROMIUM_FLAGS
from shared.audit.report import render_html
from shared.audit.summary import (
    WARN,
    AuditSummary,
    DroppedEvents,
    FlowEdge,
    HistogramBucket,
    Invariants,
    ThroughputPoint,
)
from tests.chromium import required_chromium


def edge(sender: str, destination: str, kind: str, n: int, **trouble: int) -> FlowEdge:
    counts = {"duplicate": 0, "lost": 0, "in_flight": 0, "ghost": 0, "poisoned": 0} | trouble
    return FlowEdge(sender, destination, kind, n, n - counts["lost"] - counts["poisoned"], **counts)


def a_summary() -> AuditSummary:
    """Latencies 4 ms and 185 s with nothing between, and an idle hour in the throughput."""
    histogram = [
        HistogramBucket("orders", 0.0, 2**0.25, 3),
        HistogramBucket("orders", 2**2, 2**2.25, 40),
        HistogramBucket("payments", 2**2, 2**2.25, 7),
        HistogramBucket("payments", 2 ** (69 / 4), 2 ** (70 / 4), 2),
    ]
    throughput = [
        ThroughputPoint("2026-01-01T12:00:00+00:00", "orders", 5),
        ThroughputPoint("2026-01-01T12:01:00+00:00", "payments", 3),
        ThroughputPoint("2026-01-01T13:30:00+00:00", "orders", 1),
    ]
    flow = [
        edge("client", "orders", "PlaceOrder", 45),
        edge("orders", "payments", "ChargeCard", 45, lost=1, poisoned=2),
        edge("orders", "loyalty", "OrderPlaced", 45),
        edge("payments", "orders", "CardCharged", 40),  # backwards
        edge("orders", "shipping", "OrderPlaced", 45),
        edge("payments", "shipping", "ShipOrder", 40, ghost=1),
    ]
    return AuditSummary(
        verdict="FAIL",
        as_of="2026-01-01T14:00:00+00:00",
        lost_after_seconds=300,
        audit_rows=260,
        ingress_rows=45,
        sent=265,
        processed=262,
        in_flight=0,
        invariants=Invariants(duplicates=0, lost=1, ghosts=1, invalid_rows=0),
        poisoned=2,
        poison_messages={"payments-poison": 2},
        samples={"poisoned": [{"queue": "payments-poison", "reason": "ValueError: <b>x</b>"}]},
        dropped=[
            DroppedEvents("orderrefunded", 12, "2026-01-01T12:03:00+00:00", None, ["billing"]),
            DroppedEvents("rang", 1, None, "2026-01-01T13:00:00+00:00", None),
        ],
        histogram=histogram,
        throughput_bucket_seconds=60,
        throughput=throughput,
        flow=flow,
        next_steps=["replay with `bus replay payments`"],
    )


def svgs(html: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", html, flags=re.S)


def test_the_report_is_self_contained_and_its_plots_are_real_svg() -> None:
    html = render_html(a_summary())

    [latency, throughput, flow] = svgs(html)
    for outside in ("<script", "src=", 'href="http', "url(http", "<?xml", "<!DOCTYPE svg"):
        assert outside not in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # three SVGs in one page share no id
    assert "ValueError: &lt;b&gt;x&lt;/b&gt;" in html  # a poison reason is text, not markup
    assert "bus replay payments" in html
    # Real log axis: decades labelled; an empty range between 4 ms and 185 s stays empty.
    assert re.search(r"10\^\{?5\}?|10<tspan|\$\\mathdefault\{10\^\{5\}\}\$", latency)
    # Integer count ticks only.
    ticks = re.findall(r">\s*(-?[0-9.]+)\s*</text>", latency + throughput)
    assert ticks
    assert all("." not in t for t in ticks)
    for legend in ("orders", "payments"):
        assert legend in latency
        assert legend in throughput
    for node in ("client", "orders", "payments", "loyalty", "shipping"):
        assert f">{node}<" in flow


def test_the_report_lists_dropped_events_per_topic_and_a_warning_verdict() -> None:
    html = render_html(a_summary())
    [dropped] = re.findall(
        r"<h2>Events dropped for want of a subscriber</h2><table>.*?</table>", html
    )
    [header, *rows] = [
        re.findall(r"<t[hd]>(.*?)</t[hd]>", row) for row in re.findall(r"<tr>(.*?)</tr>", dropped)
    ]
    assert header == ["topic", "events dropped", "first", "last", "endpoints that take them"]
    assert rows == [
        [
            "orderrefunded",
            '<span class="bad">12</span>',
            "2026-01-01T12:03:00+00:00",
            "unknown",
            "billing",
        ],
        ["rang", '<span class="bad">1</span>', "unknown", "2026-01-01T13:00:00+00:00", "unknown"],
    ]
    assert '<span class="fail">FAIL</span>' in html

    warned = render_html(replace(a_summary(), verdict=WARN))
    assert '<span class="warn">WARN</span>' in warned
    assert "<title>Bus audit: WARN</title>" in warned
    clean = render_html(replace(a_summary(), dropped=[]))
    assert "Events dropped" not in clean


@pytest.fixture
def browser() -> str:
    return required_chromium()


def run_chromium(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="audit-chromium-") as profile:
        return subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


PROBE = """<script>
window.addEventListener('load', () => {
  const sizes = [...document.querySelectorAll('svg')].filter(s => !s.parentElement.closest('svg'))
    .map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; });
  const drawn = [...document.querySelectorAll('svg text')].filter(t => t.getBBox().width > 0);
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({sizes, texts: drawn.length});
  document.body.appendChild(out);
});
</script>"""


def test_chromium_renders_the_report_with_every_plot_drawn(browser: str, tmp_path: Path) -> None:
    html = render_html(a_summary())
    page = tmp_path / "report.html"
    page.write_text(html)
    # The report has no script; a copy gets one that measures what the browser laid out.
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</body>", PROBE + "</body>"))

    shot = tmp_path / "report.png"
    screenshot = run_chromium(
        browser, f"--screenshot={shot}", "--window-size=1100,2400", page.as_uri()
    )
    dom = run_chromium(browser, "--enable-logging=stderr", "--v=0", "--dump-dom", probed.as_uri())

    assert screenshot.returncode == 0, screenshot.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few KB
    assert dom.returncode == 0, dom.stderr[-2000:]
    [measured] = re.findall(r'<pre id="probe">(.*?)</pre>', dom.stdout)
    layout = json.loads(measured)
    assert len(layout["sizes"]) == 3
    assert all(w > 200 and h > 100 for w, h in layout["sizes"])
    assert layout["texts"] > 20  # axis labels, ticks, legends and node names were laid out
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
