"""Inputs and options of bulk jobs in tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shared.app_loader import DEFAULT_APP
from shared.bulk.job import JobOptions, SendOptions
from shared.settings import StorageSettings

FIRE_AT = SendOptions(type_name="FireAt", key_column="game_id", to="shootingrange")


def shots(count: int, prefix: str = "game") -> list[dict[str, Any]]:
    """One shot per game (so no two rows share a partition of the receiver)."""
    return [{"game_id": f"{prefix}-{i:05d}", "position": i % 10} for i in range(count)]


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def job_options(
    storage: StorageSettings, folder: Path, job: str, input_path: str, **more: Any
) -> JobOptions:
    return JobOptions(
        job=job,
        input_path=input_path,
        file_format=more.pop("file_format", "parquet"),
        out=str(folder / f"out-{job}"),
        storage=storage,
        app_reference=DEFAULT_APP,
        progress=False,
        quiet=True,
        **more,
    )


def outcomes(spark: Any, options: JobOptions) -> dict[str, dict[str, Any]]:
    """The outcome of each row the job wrote, by row key."""
    rows = spark.read.parquet(f"{options.out}/outcomes").collect()
    return {r["row_key"]: r.asDict() for r in rows}


def rejects(options: JobOptions) -> list[dict[str, Any]]:
    lines = []
    for part in sorted(Path(options.out, "rejects").glob("part-*.json")):
        lines += [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
    return lines
