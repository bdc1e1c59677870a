"""A cleanup pass's report in one line: what ``bus cleanup`` prints and the timer function
logs at info (the full report is logged at debug)."""

from __future__ import annotations

from typing import Any


def cleanup_summary(report: dict[str, Any]) -> str:
    """One line: what the pass removed, kept and changed (poison messages re-parked with no
    expiry, when there were any), and whether it covered everything. Rows it
    could not judge are counted in ``kept`` as ``bad_row``; ``--json`` lists them."""

    def counts(values: dict[str, int]) -> str:
        listed = ", ".join(f"{k} {v}" for k, v in values.items() if v)
        return f"{sum(values.values())}" + (f" ({listed})" * bool(listed))

    tasks = report["tasks"]
    skipped = sorted({str(t["skipped"]) for t in tasks if t["skipped"]})
    state = "complete" if report["complete"] else "incomplete, run it again to go on"
    return (
        f"cleanup: removed {counts(report['removed'])}, kept {counts(report['kept'])}"
        + (f", changed {counts(report['changed'])}" * bool(report.get("changed")))
        + f"; {len(tasks)} tasks in {report['elapsed_seconds']:.1f} s, {state}"
        + (f"; skipped: {', '.join(skipped)}" * bool(skipped))
        + ("; bad rows listed by --json" * any(t.get("bad_rows") for t in tasks))
    )
