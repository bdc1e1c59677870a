"""Reads audit rows and ingress records through a ``StorageAccount`` in the driver.

For the in-memory backend (which lives in this process, out of reach of Spark tasks) and for
small accounts; large ones are read by ``shared.audit.table_source`` or exported first."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from shared.audit.dropped import collect_dropped
from shared.audit.poisoned import DEFAULT_POISON_CAP, collect_poisoned
from shared.audit.rows import Row, audit_row, ingress_row
from shared.audit.schema import AUDIT_SCHEMA, DROPPED_SCHEMA, INGRESS_SCHEMA, POISONED_SCHEMA
from shared.bus.ingress import INGRESS_ROW
from shared.bus.records import AUDIT_PREFIX
from shared.resources import CONTAINERS
from shared.stores.account import StorageAccount


async def collect_rows(
    account: StorageAccount, endpoint_tables: Sequence[str], ingress_tables: Sequence[str]
) -> tuple[list[Row], list[Row]]:
    audit: list[Row] = []
    for name in endpoint_tables:
        async for e in account.table(name).query_all(row_key_prefix=AUDIT_PREFIX):
            audit.append(audit_row(name, e.partition_key, e.properties))
    ingress: list[Row] = []
    for name in ingress_tables:
        async for e in account.table(name).query_all(row_keys=[INGRESS_ROW]):
            ingress.append(ingress_row(name, e.partition_key, e.properties))
    return audit, ingress


async def read_account(
    spark: SparkSession,
    account: StorageAccount,
    *,
    endpoint_tables: Sequence[str],
    ingress_tables: Sequence[str],
    poison_cap: int = DEFAULT_POISON_CAP,
    tokens_container: str = CONTAINERS["tokens"],
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(audit, ingress, poisoned) frames of everything the account holds (of the poison
    queues, up to ``poison_cap`` messages, their tokens looked up in ``tokens_container``)."""
    audit, ingress = await collect_rows(account, endpoint_tables, ingress_tables)
    poisoned = await collect_poisoned(
        account, endpoint_tables, cap=poison_cap, tokens=tokens_container
    )
    return (
        spark.createDataFrame(audit, AUDIT_SCHEMA),
        spark.createDataFrame(ingress, INGRESS_SCHEMA),
        spark.createDataFrame(poisoned, POISONED_SCHEMA),
    )


async def read_account_dropped(
    spark: SparkSession, account: StorageAccount, topics_container: str = CONTAINERS["topics"]
) -> DataFrame:
    """The records of events dropped for want of a subscriber, one row per topic."""
    return spark.createDataFrame(await collect_dropped(account, topics_container), DROPPED_SCHEMA)
