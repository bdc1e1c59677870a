"""Reading a job's input with Spark: Parquet, JSON (lines, or one array such as
``bus poison list --json`` prints) or CSV (with a header; every value read as text, so a key
such as ``007`` stays as it is and the message's schema converts numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pyspark.sql import DataFrame, SparkSession

Format = Literal["parquet", "json", "csv"]
FORMATS: tuple[Format, ...] = get_args(Format)
CORRUPT_COLUMN = "_corrupt_record"
"""Where Spark puts a JSON or CSV line it cannot parse; such a row is rejected."""


def input_format(path: str, given: Format | None) -> Format:
    """``given``, else from the path's suffix (``.json``/``.jsonl``, ``.csv``), else Parquet
    (a folder of part files, as Spark writes it)."""
    if given is not None:
        return given
    suffix = Path(path).suffix.lower()
    if suffix in (".json", ".jsonl", ".ndjson"):
        return "json"
    return "csv" if suffix == ".csv" else "parquet"


def read_input(spark: SparkSession, path: str, file_format: Format) -> DataFrame:
    reader = spark.read
    if file_format == "parquet":
        return reader.parquet(path)
    if file_format == "csv":
        return reader.option("header", True).option("mode", "PERMISSIVE").csv(path)
    return reader.option("multiLine", _json_array(path)).json(path)


def _json_array(path: str) -> bool:
    """Whether ``path`` is a local file holding one JSON array (read whole, not by line).
    Anything else, remote paths and folders included, is read as JSON lines."""
    file = Path(path)
    if not file.is_file():
        return False
    with file.open("rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")
