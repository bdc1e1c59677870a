"""Spark schemas of the audit inputs (columns as in ``shared.audit.rows``)."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from shared.audit.rows import AUDIT_COLUMNS, INGRESS_COLUMNS, TIMESTAMP_COLUMNS


def _schema(columns: tuple[str, ...]) -> StructType:
    return StructType(
        [
            StructField(name, TimestampType() if name in TIMESTAMP_COLUMNS else StringType())
            for name in columns
        ]
    )


AUDIT_SCHEMA = _schema(AUDIT_COLUMNS)
INGRESS_SCHEMA = _schema(INGRESS_COLUMNS)

DELIVERIES_SCHEMA = ArrayType(
    StructType(
        [
            StructField("id", StringType()),
            StructField("type", StringType()),
            StructField("destination", StringType()),
        ]
    )
)
"""The parsed form of ``caused`` and ``outgoing``."""
