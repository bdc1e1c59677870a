"""The printed tables and ``bench/results.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.bench.modes import AT_LEAST_ONCE, TOKEN
from lab.bench.runner import Measurement
from shared.terminal import table


def ratio(
    measurements: Sequence[Measurement], mode: str, base: str = AT_LEAST_ONCE
) -> float | None:
    """Throughput of ``mode`` over that of ``base`` (None unless both ran cleanly)."""
    found = {m.mode: m for m in measurements if m.ok}
    if mode not in found or base not in found or not found[base].throughput_msgs_per_s:
        return None
    return found[mode].throughput_msgs_per_s / found[base].throughput_msgs_per_s


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


MODE_COLUMNS = (
    "mode",
    "msgs/s",
    "vs floor",
    "ops/msg",
    "p50 ms",
    "p99 ms",
    "residue",
    "peak MB",
    "cpu ms/msg",
    "emu ms/msg",
)


def mode_table(measurements: Sequence[Measurement]) -> list[str]:
    rows: list[tuple[object, ...]] = []
    for m in measurements:
        if not m.available:
            rows.append((m.mode, "not available in this version of the bus"))
            continue
        if m.error is not None:
            rows.append((m.mode, f"FAILED: {m.error}"))
            if not m.handled:
                continue
        rows.append(
            (
                m.mode,
                _num(m.throughput_msgs_per_s),
                _num(ratio(measurements, m.mode), 2),
                _num(m.ops_per_message, 2),
                _num(m.p50_ms),
                _num(m.p99_ms),
                m.residue,
                _num(m.peak_rss_mb),
                _num(m.client_cpu_ms_per_message, 2),
                _num(m.emulator_cpu_ms_per_message, 2),
            )
        )
    return _table(MODE_COLUMNS, rows)


def detail_lines(measurements: Sequence[Measurement]) -> list[str]:
    lines = []
    for m in measurements:
        if not m.ok and not m.handled:
            continue
        per_message = ", ".join(
            f"{kind} {n / max(m.handled, 1):.2f}" for kind, n in m.operations.items() if n
        )
        residue = ", ".join(f"{k} {n}" for k, n in m.residue_kinds.items()) or "none"
        lines += [
            f"{m.mode}: {m.handled} messages in {m.elapsed_s:.1f}s; "
            f"service p50/p99 {_num(m.service_p50_ms)}/{_num(m.service_p99_ms)} ms; "
            f"{m.empty_polls} empty polls; ingress {m.ingress_ops_per_root:.1f} ops/root",
            f"  ops per message: {per_message}",
            "  mean ms per operation: "
            + ", ".join(f"{kind} {ms:.1f}" for kind, ms in m.operation_ms.items()),
            f"  rows and blobs after the run: {residue}; ingress rows {m.ingress_rows}",
        ]
    return lines


SCALING_COLUMNS = ("mode", "in flight", "hosts", "msgs/s", "ops/msg", "p50 ms")


def scaling_table(measurements: Sequence[Measurement]) -> list[str]:
    rows: list[tuple[object, ...]] = []
    for m in measurements:
        if not m.ok:
            reason = "not available" if not m.available else f"FAILED: {m.error}"
            rows.append((m.mode, m.concurrency, m.processes, reason))
            continue
        rows.append(
            (
                m.mode,
                m.concurrency,
                m.processes,
                _num(m.throughput_msgs_per_s),
                _num(m.ops_per_message, 2),
                _num(m.p50_ms),
            )
        )
    return _table(SCALING_COLUMNS, rows)


def _table(columns: Sequence[str], rows: list[tuple[object, ...]]) -> list[str]:
    """Numbers right-aligned. A row shorter than the columns ends with a note (why a mode
    has no figures), which goes to the last column, ``note``, shown only when needed."""
    noted = any(len(row) < len(columns) for row in rows)
    cells = [
        (*row[:-1], *([""] * (len(columns) - len(row) + 1)), row[-1])
        if len(row) < len(columns)
        else (*row, *([""] * noted))
        for row in rows
    ]
    names = (*columns, *(("note",) * noted))
    return table(names, cells, right=columns[1:]).splitlines()


def _clean(value: Any) -> Any:
    """JSON has no NaN: a percentile of no samples is written as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def results_document(
    modes: Sequence[Measurement],
    scaling: Sequence[Measurement],
    context: dict[str, Any],
) -> dict[str, Any]:
    token_ratios = {
        f"{m.concurrency}x{m.processes}": ratio(
            [s for s in scaling if (s.concurrency, s.processes) == (m.concurrency, m.processes)],
            TOKEN,
        )
        for m in scaling
        if m.mode == TOKEN
    }
    document: dict[str, Any] = _clean(
        {
            **context,
            "modes": [m.to_json() for m in modes],
            "ratio_token_vs_at_least_once": ratio(modes, TOKEN),
            "scaling": [m.to_json() for m in scaling],
            "scaling_ratio_token_vs_at_least_once": token_ratios,
        }
    )
    return document


def write_results(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
