"""Reads an exported audit (``shared.audit.export``) or any data laid out the same way:
``<path>/audit`` and ``<path>/ingress``, each a directory of Parquet or JSON-lines files with
the columns of ``shared.audit.rows``, and optionally ``<path>/poisoned`` (the messages that
were in poison queues) and ``<path>/dropped`` (the records of events dropped for want of a
subscriber). ``path`` may be any URL the cluster's Hadoop file system understands
(``abfss://`` where the connector is installed).

``caused`` and ``outgoing`` are typed lists (``array<struct<id,type,destination>>``); an
export written when they were JSON text is still read, parsed once here."""

from __future__ import annotations

from typing import Literal

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from shared.audit.rows import DELIVERY_COLUMNS, LATER_AUDIT_COLUMNS
from shared.audit.schema import (
    AUDIT_SCHEMA,
    DELIVERIES_SCHEMA,
    DROPPED_SCHEMA,
    INGRESS_SCHEMA,
    POISONED_SCHEMA,
)
from shared.errors import ConfigurationError

FileFormat = Literal["parquet", "json"]
AUDIT_DIR = "audit"
INGRESS_DIR = "ingress"
POISONED_DIR = "poisoned"
DROPPED_DIR = "dropped"


def _column(df: DataFrame, field: StructField) -> Column:
    if field.name in DELIVERY_COLUMNS and isinstance(df.schema[field.name].dataType, StringType):
        return F.from_json(field.name, DELIVERIES_SCHEMA).alias(field.name)
    return F.col(field.name).cast(field.dataType).alias(field.name)


def _read(
    spark: SparkSession,
    location: str,
    schema: StructType,
    file_format: FileFormat,
    optional: bool = False,
) -> DataFrame:
    try:
        reader = spark.read.format(file_format)
        if file_format == "json":
            reader = reader.schema(schema)
        df = reader.load(location)
    except AnalysisException as e:
        if optional:
            return spark.createDataFrame([], schema)
        raise ConfigurationError(f"cannot read {file_format} files at {location}: {e}") from e
    missing = [f.name for f in schema.fields if f.name not in df.columns]
    if set(missing) - LATER_AUDIT_COLUMNS and not optional:
        raise ConfigurationError(f"{location} lacks the columns {', '.join(missing)}")
    # An export from before the audit verified poison messages lacks their signal's columns:
    # those stay null, so none of its entries can cover a delivery.
    return df.select(
        *[
            F.lit(None).cast(f.dataType).alias(f.name) if f.name in missing else _column(df, f)
            for f in schema.fields
        ]
    )


def read_files(
    spark: SparkSession, path: str, file_format: FileFormat = "parquet"
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(audit, ingress, poisoned) DataFrames with exactly the expected columns and types; a
    column missing from the files is an error rather than a silent column of nulls. Without
    a ``poisoned`` folder no message was parked (or the export predates them); a poisoned
    column missing there is null (an export from before entries were verified: none of its
    entries is then verifiable)."""
    base = path.rstrip("/")
    audit = _read(spark, f"{base}/{AUDIT_DIR}", AUDIT_SCHEMA, file_format)
    ingress = _read(spark, f"{base}/{INGRESS_DIR}", INGRESS_SCHEMA, file_format)
    poisoned = _read(spark, f"{base}/{POISONED_DIR}", POISONED_SCHEMA, file_format, True)
    return audit, ingress, poisoned


def read_dropped_files(
    spark: SparkSession, path: str, file_format: FileFormat = "parquet"
) -> DataFrame:
    """The export's records of events dropped for want of a subscriber; none without a
    ``dropped`` folder (no drop recorded, or an export from before they were exported)."""
    return _read(spark, f"{path.rstrip('/')}/{DROPPED_DIR}", DROPPED_SCHEMA, file_format, True)
