"""Spark schemas of the audit inputs (columns as in ``shared.audit.rows``)."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from shared.audit.rows import (
    AUDIT_COLUMNS,
    COUNT_COLUMNS,
    DELIVERY_COLUMNS,
    DELIVERY_FIELDS,
    DROPPED_COLUMNS,
    INGRESS_COLUMNS,
    POISONED_COLUMNS,
    TIMESTAMP_COLUMNS,
)

DELIVERIES_SCHEMA = ArrayType(
    StructType([StructField(name, StringType()) for name in DELIVERY_FIELDS])
)
"""``caused`` and ``outgoing``: ``array<struct<id,type,destination>>``."""


def _type(name: str) -> DataType:
    if name in TIMESTAMP_COLUMNS:
        return TimestampType()
    if name in COUNT_COLUMNS:
        return LongType()
    return DELIVERIES_SCHEMA if name in DELIVERY_COLUMNS else StringType()


def _schema(columns: tuple[str, ...]) -> StructType:
    return StructType([StructField(name, _type(name)) for name in columns])


AUDIT_SCHEMA = _schema(AUDIT_COLUMNS)
INGRESS_SCHEMA = _schema(INGRESS_COLUMNS)
POISONED_SCHEMA = _schema(POISONED_COLUMNS)
DROPPED_SCHEMA = _schema(DROPPED_COLUMNS)
