"""The printed tables and ``bench/results.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from lab.bench.modes import AT_LEAST_ONCE, STORES, TOKEN
from lab.bench.prices import ACCOUNT, PRICES, READ_ON
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
        if m.request_units_per_message is not None:
            lines.append(
                "  Cosmos DB request units per message, as the server charged them: "
                f"hot path {m.request_units_per_message:.2f}, cleanup "
                f"{_num(m.cleanup_request_units_per_message, 2)}"
            )
        if m.cleanup_operations:
            cleanup = ", ".join(
                f"{kind} {n / max(m.handled, 1):.3f}" for kind, n in m.cleanup_operations.items()
            )
            removed = ", ".join(f"{k} {n}" for k, n in m.cleanup_removed.items()) or "nothing"
            lines += [
                f"  cleanup ops per message: {cleanup}",
                f"  the cleanup removed: {removed}",
            ]
    return lines


WHOLE_COLUMNS = (
    "mode",
    "hot ops/msg",
    "cleanup",
    "whole",
    "hot $/M",
    "cleanup $/M",
    "whole $/M",
    "left",
)


def whole_cost_table(measurements: Sequence[Measurement]) -> list[str]:
    """Per mode: storage requests per handled message on the hot path, in the cleanup pass
    that followed, and both, with what they cost per million messages; ``left`` is what the
    cleanup left besides the business state rows."""
    rows: list[tuple[object, ...]] = []
    for m in measurements:
        if not m.ok:
            continue
        usd = m.usd_per_million_messages
        left = sum(n for kind, n in m.residue_after_cleanup.items() if kind != "state")
        rows.append(
            (
                m.mode,
                _num(m.ops_per_message, 3),
                _num(m.cleanup_ops_per_message, 3),
                _num(m.whole_ops_per_message, 3),
                _num(usd.get("hot_path"), 2),
                _num(usd.get("cleanup"), 2),
                _num(usd.get("whole"), 2),
                left,
            )
        )
    return _table(WHOLE_COLUMNS, rows)


COMPARED_APART = (AT_LEAST_ONCE, TOKEN, *STORES)
"""Not among the modes token mode's whole cost is held against: the floor (no exactly-once)
and token mode itself, over any store."""


def token_whole_verdict(measurements: Sequence[Measurement]) -> dict[str, Any] | None:
    """Token mode's whole cost against the lowest of the other exactly-once modes (None
    unless token mode and at least one of them ran cleanly)."""
    found = {m.mode: m for m in measurements if m.ok}
    others = [m for m in found.values() if m.mode not in COMPARED_APART]
    if TOKEN not in found or not others:
        return None
    token = found[TOKEN]
    cheapest = min(others, key=lambda m: m.whole_ops_per_message)
    cheapest_usd = min(others, key=lambda m: m.usd_per_million_messages["whole"])
    return {
        "token_whole_ops_per_message": round(token.whole_ops_per_message, 4),
        "lowest_other_mode": cheapest.mode,
        "lowest_other_whole_ops_per_message": round(cheapest.whole_ops_per_message, 4),
        "token_lowest": token.whole_ops_per_message <= cheapest.whole_ops_per_message,
        "token_whole_usd_per_million": token.usd_per_million_messages["whole"],
        "lowest_other_usd_mode": cheapest_usd.mode,
        "lowest_other_whole_usd_per_million": cheapest_usd.usd_per_million_messages["whole"],
        "token_lowest_usd": token.usd_per_million_messages["whole"]
        <= cheapest_usd.usd_per_million_messages["whole"],
    }


def verdict_line(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return "whole cost: token mode or every other exactly-once mode missing from this run"
    ops = verdict["token_whole_ops_per_message"]
    other = verdict["lowest_other_whole_ops_per_message"]
    usd = verdict["token_whole_usd_per_million"]
    other_usd = verdict["lowest_other_whole_usd_per_million"]
    return (
        f"whole cost: token {ops:.3f} requests/msg "
        f"{'<=' if verdict['token_lowest'] else '>'} {other:.3f} "
        f"({verdict['lowest_other_mode']}, the lowest other exactly-once mode); "
        f"${usd:.2f} {'<=' if verdict['token_lowest_usd'] else '>'} ${other_usd:.2f} "
        f"per million messages ({verdict['lowest_other_usd_mode']})"
    )


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
            "whole_cost": {
                "prices": {
                    "account": ACCOUNT,
                    "read_on": READ_ON,
                    "usd_per_10k": {k: c.usd_per_10k for k, c in PRICES.items()},
                },
                "token_vs_other_modes": token_whole_verdict(modes),
            },
            "scaling": [m.to_json() for m in scaling],
            "scaling_ratio_token_vs_at_least_once": token_ratios,
        }
    )
    return document


RUN_KEYS = ("generated_at", "machine", "settings")
"""What says under which conditions a run measured its modes."""


def merged_results(
    earlier: dict[str, Any],
    modes: Sequence[Measurement],
    scaling: Sequence[Measurement],
    context: dict[str, Any],
) -> dict[str, Any]:
    """This run's results with the modes of an ``earlier`` results document it did not
    measure kept, so that a run of a few modes adds them to the full figures rather than
    replacing those. The document is this run's (its context, the ratios and verdict over all
    the modes it holds); ``earlier_runs`` names the run each kept mode comes from, so that no
    figure is read as measured beside the others when it was not."""
    measured = {m.mode for m in modes}
    known = {f.name for f in fields(Measurement)}
    kept = [
        # A figure the earlier run did not have is left at its default, one it had that
        # the bench no longer reports is dropped.
        Measurement(**{k: v for k, v in m.items() if k in known})
        for m in earlier.get("modes", [])
        if m["mode"] not in measured
    ]
    # In the earlier run's order, the modes it did not have after them, as the bench lists
    # them: a mode keeps its place in the table whichever run measured it last.
    place = {m["mode"]: i for i, m in enumerate(earlier.get("modes", []))}
    ordered = sorted([*kept, *modes], key=lambda m: place.get(m.mode, len(place)))
    document = results_document(ordered, scaling, context)
    kept_labels = {m.mode for m in kept}
    runs = [
        {**run, "modes": [label for label in run["modes"] if label in kept_labels]}
        for run in earlier.get("earlier_runs", [])
    ]
    claimed = {label for run in runs for label in run["modes"]}
    runs.append(
        {
            **{key: earlier.get(key) for key in RUN_KEYS},
            "modes": sorted(kept_labels - claimed),
        }
    )
    document["earlier_runs"] = [run for run in runs if run["modes"]]
    if not scaling and earlier.get("scaling"):
        # Kept with the run that measured them, which is not this one.
        document["scaling_generated_at"] = earlier.get(
            "scaling_generated_at", earlier.get("generated_at")
        )
        document["scaling"] = earlier["scaling"]
        document["scaling_ratio_token_vs_at_least_once"] = earlier.get(
            "scaling_ratio_token_vs_at_least_once", {}
        )
    return document


def write_results(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
