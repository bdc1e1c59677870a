"""Reads an exported audit (``shared.audit.export``) or any data laid out the same way:
``<path>/audit`` and ``<path>/ingress``, each a directory of Parquet or JSON-lines files with
the columns of ``shared.audit.rows``. ``path`` may be any URL the cluster's Hadoop file system
understands (``abfss://`` where the connector is installed)."""

from __future__ import annotations

from typing import Literal

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from shared.audit.schema import AUDIT_SCHEMA, INGRESS_SCHEMA
from shared.errors import ConfigurationError

FileFormat = Literal["parquet", "json"]
AUDIT_DIR = "audit"
INGRESS_DIR = "ingress"


def read_files(
    spark: SparkSession, path: str, file_format: FileFormat = "parquet"
) -> tuple[DataFrame, DataFrame]:
    """(audit, ingress) DataFrames with exactly the expected columns and types; a column
    missing from the files is an error rather than a silent column of nulls."""
    base = path.rstrip("/")
    frames = []
    for folder, schema in ((AUDIT_DIR, AUDIT_SCHEMA), (INGRESS_DIR, INGRESS_SCHEMA)):
        location = f"{base}/{folder}"
        try:
            reader = spark.read.format(file_format)
            if file_format == "json":
                reader = reader.schema(schema)
            df = reader.load(location)
        except AnalysisException as e:
            raise ConfigurationError(f"cannot read {file_format} files at {location}: {e}") from e
        missing = [f.name for f in schema.fields if f.name not in df.columns]
        if missing:
            raise ConfigurationError(f"{location} lacks the columns {', '.join(missing)}")
        frames.append(df.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields]))
    return frames[0], frames[1]
