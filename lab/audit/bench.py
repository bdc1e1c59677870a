"""``make audit-bench``: the Spark audit against DuckDB, Polars (``lab.audit.anchors``) and
the same checks in one plain Python process.

For each size it generates synthetic audit rows with Spark into a temporary Parquet folder
(``lab.audit.synthetic``), then measures, each in a fresh child process reading that same
folder:

- Spark: ``run_audit`` on ``local[2]`` with a 1 GiB driver heap; time excludes the session
  start-up (reported apart); peak memory is the driver Python process's ru_maxrss plus the
  JVM's VmHWM (its peak resident set, read from /proc before it exits; local mode runs driver
  and executors in that one JVM; no Python workers run, every check is a built-in
  expression);
- DuckDB and Polars (2 threads each, as many as local[2] has cores): ``lab.audit.anchors``;
- Python: ``lab.audit.baseline``; peak memory of these three is the child's ru_maxrss
  (os.wait4).

Both must find the planted anomalies; a mismatch fails the bench. This is a measurement, not
a timed test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, cast

from lab.audit.synthetic import CHAINS_PER_SECOND, START, SyntheticSpec, expected_counts

DEFAULT_SIZES = (1_000_000, 10_000_000)
BENCH_CONF = {"spark.driver.memory": "1g"}
MASTER = "local[2]"


def _as_of(spec: SyntheticSpec) -> Any:
    # Far after the last send, so every unprocessed delivery counts as lost.
    return START + timedelta(seconds=spec.chains / CHAINS_PER_SECOND + 3600)


def _vm_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class _RssSampler(threading.Thread):
    """Samples a process's resident set every 100 ms (VmHWM gives the exact peak; the samples
    show it was not a momentary spike at exit)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kib = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            self.peak_kib = max(self.peak_kib, _vm_kib(self.pid, "VmRSS"))


def _child_generate(rows: int, out: str) -> dict[str, Any]:
    from lab.audit.synthetic import write_synthetic
    from shared.audit.session import get_session

    spark = get_session(MASTER, "audit-bench-generate", BENCH_CONF)
    started = time.perf_counter()
    write_synthetic(spark, SyntheticSpec(rows), out)
    spark.stop()
    return {"seconds": time.perf_counter() - started}


def _child_spark(rows: int, data: str) -> dict[str, Any]:
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.file_source import read_files
    from shared.audit.session import get_session

    spec = SyntheticSpec(rows)
    started = time.perf_counter()
    spark = get_session(MASTER, "audit-bench-spark", BENCH_CONF)
    startup = time.perf_counter() - started
    gateway: Any = spark.sparkContext._gateway
    jvm_pid = int(gateway.proc.pid)
    sampler = _RssSampler(jvm_pid)
    sampler.start()
    started = time.perf_counter()
    audit, ingress, _ = read_files(spark, data)
    # No samples: the baseline lists none either, so both do the same work.
    options = AuditOptions(as_of=_as_of(spec), lost_after=timedelta(), sample_limit=0)
    summary = run_audit(audit, ingress, options)
    seconds = time.perf_counter() - started
    sampler.stopped.set()
    jvm_peak_kib = _vm_kib(jvm_pid, "VmHWM")
    # This process's own peak: once the JVM is reaped, a parent's wait4 would fold the
    # JVM's peak into ours and count it twice.
    driver_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    spark.stop()
    # The JVM exits when its stdin closes; reaped here, its CPU time counts in this child's
    # (wait4). Waiting without closing it would wait forever.
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=60)
    inv = summary.invariants
    return {
        "seconds": seconds,
        "startup_seconds": startup,
        "jvm_peak_kib": jvm_peak_kib,
        "driver_kib": driver_kib,
        "jvm_sampled_peak_kib": sampler.peak_kib,
        "stage_seconds": summary.timings,
        "counts": {
            "audit_rows": summary.audit_rows,
            "duplicates": inv.duplicates,
            "lost": inv.lost,
            "ghosts": inv.ghosts,
            "sent": summary.sent,
            "processed": summary.processed,
        },
        "p99_ms": {e.endpoint: round(e.p99_ms, 1) for e in summary.latency},
    }


def _child_python(rows: int, data: str) -> dict[str, Any]:
    from lab.audit.baseline import audit_files

    spec = SyntheticSpec(rows)
    started = time.perf_counter()
    result = audit_files(Path(data), as_of=_as_of(spec), lost_after=timedelta())
    return {
        "seconds": time.perf_counter() - started,
        "counts": {
            "audit_rows": result.audit_rows,
            "duplicates": result.duplicates,
            "lost": result.lost,
            "ghosts": result.ghosts,
            "sent": result.sent,
            "processed": result.processed,
        },
        "p99_ms": {e: round(v["p99_ms"], 1) for e, v in sorted(result.latency.items())},
    }


def _child_anchor(engine: str, rows: int, data: str) -> dict[str, Any]:
    from lab.audit import anchors

    spec = SyntheticSpec(rows)
    audit = anchors.duckdb_audit if engine == "duckdb" else anchors.polars_audit
    started = time.perf_counter()
    result = audit(Path(data), as_of=_as_of(spec), lost_after=timedelta())
    return {
        "seconds": time.perf_counter() - started,
        "counts": result.counts(),
        "p99_ms": result.p99_ms,
    }


def _measure(kind: str, rows: int, data: str) -> tuple[dict[str, Any], int]:
    """Run one measurement in a fresh child; returns its JSON (with ``cpu_seconds``: user
    and system time of the child and what it reaped, the JVM included) and its ru_maxrss in
    KiB. CPU time tells the engines apart even when other work on the machine stretches
    their wall times."""
    command = [sys.executable, "-m", "lab.audit.bench", "--child", kind, str(rows), data]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    output = cast(IO[str], child.stdout).read()  # stdout=PIPE: the pipe is always there
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{kind} measurement at {rows} rows failed ({child.returncode})")
    result = json.loads(output.strip().splitlines()[-1])
    result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return result, int(usage.ru_maxrss)


def run_bench(sizes: Sequence[int], workdir: Path) -> int:
    lines: list[str] = []
    failures = 0
    for rows in sizes:
        data = str(workdir / f"rows{rows}")
        generated, _ = _measure("generate", rows, data)
        print(f"audit-bench: generated {rows:,} rows in {generated['seconds']:.1f} s", flush=True)
        spark, _ = _measure("spark", rows, data)
        print(
            f"audit-bench: rows={rows} engine=spark seconds={spark['seconds']:.1f} "
            f"cpu_s={spark['cpu_seconds']:.1f} (whole child: start-up, JIT and GC included)",
            flush=True,
        )
        spark_driver_kib = spark["driver_kib"]
        duckdb, duckdb_kib = _measure("duckdb", rows, data)
        polars, polars_kib = _measure("polars", rows, data)
        python, python_kib = _measure("python", rows, data)
        shutil.rmtree(data, ignore_errors=True)
        expected = expected_counts(SyntheticSpec(rows))
        engines = (("spark", spark), ("duckdb", duckdb), ("polars", polars), ("python", python))
        for name, result in engines:
            wrong = {k: v for k, v in expected.items() if result["counts"][k] != v}
            if wrong or result["counts"] != spark["counts"]:
                failures += 1
                print(f"audit-bench: {name} found {result['counts']}, expected {expected}")
        n = spark["counts"]["audit_rows"]
        spark_rate = n / spark["seconds"]
        python_rate = n / python["seconds"]
        duckdb_rate = n / duckdb["seconds"]
        for name, result, kib in (
            ("duckdb", duckdb, duckdb_kib),
            ("polars", polars, polars_kib),
            ("python", python, python_kib),
        ):
            print(
                f"audit-bench: rows={n} engine={name} seconds={result['seconds']:.1f} "
                f"rows_per_s={n / result['seconds']:.0f} peak_mb={kib / 1024:.0f} "
                f"cpu_s={result['cpu_seconds']:.1f} "
                f"spark_vs_{name}={spark_rate / (n / result['seconds']):.2f}",
                flush=True,
            )
        spark_mb = (spark_driver_kib + spark["jvm_peak_kib"]) / 1024
        python_mb = python_kib / 1024
        print(
            f"audit-bench: rows={n} spark_s={spark['seconds']:.1f} "
            f"(startup {spark['startup_seconds']:.1f} s not included; stages "
            + ", ".join(f"{k} {v:.1f}" for k, v in spark["stage_seconds"].items())
            + f") python_s={python['seconds']:.1f} spark_driver_python_mb="
            f"{spark_driver_kib / 1024:.0f} spark_jvm_mb={spark['jvm_peak_kib'] / 1024:.0f} "
            f"(sampled {spark['jvm_sampled_peak_kib'] / 1024:.0f}) "
            f"p99_ms spark={spark['p99_ms']} python={python['p99_ms']}",
            flush=True,
        )
        lines.append(
            f"audit-bench: rows={n} spark_rows_per_s={spark_rate:.0f} "
            f"python_rows_per_s={python_rate:.0f} speedup={spark_rate / python_rate:.2f} "
            f"spark_peak_mb={spark_mb:.0f} python_peak_mb={python_mb:.0f} "
            f"duckdb_rows_per_s={duckdb_rate:.0f} spark_vs_duckdb={spark_rate / duckdb_rate:.2f}"
        )
        print(lines[-1], flush=True)
    if failures:
        print(f"audit-bench: {failures} result mismatches", flush=True)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.audit.bench",
        description="Audit synthetic rows with Spark (local[2]) and with one plain Python "
        "process; print rows/s and peak memory of both at each size.",
    )
    parser.add_argument("--rows", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--workdir", type=Path, help="where the Parquet data goes (temporary)")
    parser.add_argument(
        "--child", nargs=3, metavar=("KIND", "ROWS", "PATH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        kind, rows, path = args.child
        if kind in ("duckdb", "polars"):
            print(json.dumps(_child_anchor(kind, int(rows), path)), flush=True)
            return 0
        run = {"generate": _child_generate, "spark": _child_spark, "python": _child_python}[kind]
        print(json.dumps(run(int(rows), path)), flush=True)
        return 0
    if any(r < 100 for r in args.rows):
        parser.error("--rows must be at least 100")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="audit-bench-"))
    try:
        return run_bench(sorted(args.rows), workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
