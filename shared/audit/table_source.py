"""Reads audit rows and ingress records straight from Table Storage, in parallel.

No Hadoop connector for Table Storage exists here, so each Spark task runs the Python SDK
itself inside ``mapPartitions``: the driver only plans *slices* (a table and a range of
PartitionKeys), and every task pages through its slices with the server-side filter
``PartitionKey ge lo and PartitionKey lt hi`` plus a RowKey filter. Ranges are contiguous, so
together they cover every possible key whatever the keys look like; how evenly rows spread
over them depends on the keys (hashes and ids spread well; a common prefix lands in few
ranges), hence ``splits`` can be raised, or exact boundaries given.

Small tables get a small plan: the driver first reads one page (up to 1,000 rows) of each
table; a table that fits in it is done there, and only tables with more rows are split into
tasks. An audit of a few rows then costs one query per table instead of a Spark task per
range and table.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from shared.audit.dropped import collect_dropped
from shared.audit.poisoned import DEFAULT_POISON_CAP, collect_poisoned
from shared.audit.rows import Row, audit_row, ingress_row
from shared.audit.schema import AUDIT_SCHEMA, DROPPED_SCHEMA, INGRESS_SCHEMA, POISONED_SCHEMA
from shared.bus.ingress import INGRESS_ROW
from shared.bus.records import AUDIT_PREFIX
from shared.errors import ConfigurationError, StorageError
from shared.resources import CONTAINERS
from shared.settings import StorageSettings

log = logging.getLogger(__name__)

Kind = Literal["audit", "ingress"]

# Sorted by code point, which is how Table Storage orders keys.
_ALPHABET = "".join(sorted(string.digits + string.ascii_letters))
PAGE_SIZE = 1000
SPLITS_DEFAULT = 16
"""Partition-key ranges (Spark tasks) per table that holds more than a page."""


@dataclass(frozen=True)
class Slice:
    """One task's share: rows of ``kind`` in ``table`` with low <= PartitionKey < high
    (``high`` None: no upper bound)."""

    table: str
    kind: Kind
    low: str
    high: str | None


def key_boundaries(splits: int) -> list[str]:
    """``splits - 1`` ascending boundary strings spread evenly over alphanumeric keys (one
    character deep while that suffices, then two)."""
    if splits < 1:
        raise ConfigurationError("splits must be at least 1")
    depth = 1 if splits <= len(_ALPHABET) else 2
    universe = list(_ALPHABET) if depth == 1 else [a + b for a in _ALPHABET for b in _ALPHABET]
    if splits > len(universe):
        raise ConfigurationError(f"at most {len(universe)} splits per table")
    return [universe[(i * len(universe)) // splits] for i in range(1, splits)]


def plan_slices(
    tables: Sequence[str], kind: Kind, splits: int, boundaries: Sequence[str] | None = None
) -> list[Slice]:
    """Slices covering every PartitionKey of every table."""
    cuts = sorted(set(boundaries)) if boundaries else key_boundaries(splits)
    lows = ["", *cuts]
    highs: list[str | None] = [*cuts, None]
    return [Slice(t, kind, lo, hi) for t in tables for lo, hi in zip(lows, highs, strict=True)]


def slice_filter(piece: Slice) -> tuple[str, dict[str, str]]:
    """The OData filter and its parameters for one slice (the SDK quotes parameters)."""
    clauses = ["PartitionKey ge @low"]
    parameters = {"low": piece.low}
    if piece.high is not None:
        clauses.append("PartitionKey lt @high")
        parameters["high"] = piece.high
    if piece.kind == "audit":
        # Every RowKey starting with 'audit|' sorts below 'audit}' ('}' follows '|').
        clauses.append("RowKey ge @rlow and RowKey lt @rhigh")
        parameters.update(rlow=AUDIT_PREFIX, rhigh=AUDIT_PREFIX[:-1] + "}")
    else:
        clauses.append("RowKey eq @row")
        parameters["row"] = INGRESS_ROW
    return " and ".join(clauses), parameters


def _service_client(settings: StorageSettings) -> Any:
    """A synchronous SDK client: tasks are plain Python functions, no event loop needed."""
    from azure.data.tables import TableServiceClient

    if settings.connection_string is not None:
        return TableServiceClient.from_connection_string(settings.connection_string)
    credential: Any
    if settings.managed_identity:
        from azure.identity import ManagedIdentityCredential

        credential = ManagedIdentityCredential(client_id=settings.client_id)
    else:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential(managed_identity_client_id=settings.client_id)
    if settings.table_service_uri is None:
        raise ConfigurationError("no table service URI in the storage settings")
    return TableServiceClient(endpoint=settings.table_service_uri, credential=credential)


def _convert(piece: Slice, entity: Any) -> Row:
    convert = audit_row if piece.kind == "audit" else ingress_row
    return convert(piece.table, str(entity["PartitionKey"]), entity)


def read_slices(settings: StorageSettings, slices: Iterable[Slice]) -> Iterator[Row]:
    """Runs inside a Spark task: every row of the given slices, as audit or ingress rows.
    A table that does not exist has no rows (an endpoint that was never provisioned)."""
    from azure.core.exceptions import ResourceNotFoundError

    with _service_client(settings) as service:
        for piece in slices:
            query, parameters = slice_filter(piece)
            client = service.get_table_client(piece.table)
            try:
                for entity in client.query_entities(
                    query, parameters=parameters, results_per_page=PAGE_SIZE
                ):
                    yield _convert(piece, entity)
            except ResourceNotFoundError:
                log.warning("table %s does not exist; reading it as empty", piece.table)


@dataclass
class Probe:
    """What the driver's first page of each table showed: the rows of the tables that fit in
    it, and the tables that hold more (to be split into tasks)."""

    rows: list[Row]
    large: list[str]


def probe_tables(
    settings: StorageSettings, tables: Sequence[str], kind: Kind, page_size: int = PAGE_SIZE
) -> Probe:
    """Reads the first page (``page_size`` rows) of every table in the driver."""
    from azure.core.exceptions import AzureError

    try:
        return _probe(settings, tables, kind, page_size)
    except AzureError as e:
        raise StorageError(f"cannot read the audit tables: {e}") from e


def _probe(settings: StorageSettings, tables: Sequence[str], kind: Kind, page_size: int) -> Probe:
    from azure.core.exceptions import ResourceNotFoundError

    probe = Probe([], [])
    with _service_client(settings) as service:
        for table in tables:
            whole = Slice(table, kind, "", None)
            query, parameters = slice_filter(whole)
            pages = (
                service.get_table_client(table)
                .query_entities(query, parameters=parameters, results_per_page=page_size)
                .by_page()
            )
            try:
                first = [_convert(whole, e) for e in next(pages, [])]
            except ResourceNotFoundError:
                log.warning("table %s does not exist; reading it as empty", table)
                continue
            if pages.continuation_token:
                probe.large.append(table)
            else:
                probe.rows.extend(first)
    return probe


def read_tables(
    spark: SparkSession,
    settings: StorageSettings,
    *,
    endpoint_tables: Sequence[str],
    ingress_tables: Sequence[str],
    splits: int = SPLITS_DEFAULT,
    boundaries: Sequence[str] | None = None,
    small_table_rows: int = PAGE_SIZE,
) -> tuple[DataFrame, DataFrame]:
    """(audit, ingress) DataFrames: tables of at most ``small_table_rows`` rows (up to 1,000:
    one page; 0 reads every table in tasks) are read by the driver, the others by Spark
    tasks, one per slice. Those are
    persisted (memory, spilling to disk) because every check reads them again and a re-read
    would query the account again."""

    def frame(tables: Sequence[str], kind: Kind) -> DataFrame:
        schema = AUDIT_SCHEMA if kind == "audit" else INGRESS_SCHEMA
        probe = (
            probe_tables(settings, tables, kind, small_table_rows)
            if small_table_rows
            else Probe([], list(tables))
        )
        small = spark.createDataFrame(probe.rows, schema)
        slices = plan_slices(probe.large, kind, splits, boundaries)
        if not slices:
            return small
        rdd = spark.sparkContext.parallelize(slices, len(slices)).mapPartitions(
            partial(read_slices, settings)
        )
        large = spark.createDataFrame(rdd, schema).persist(StorageLevel.MEMORY_AND_DISK)
        return large.unionByName(small) if probe.rows else large

    return frame(endpoint_tables, "audit"), frame(ingress_tables, "ingress")


async def read_poisoned(
    spark: SparkSession,
    settings: StorageSettings,
    endpoint_tables: Sequence[str],
    cap: int = DEFAULT_POISON_CAP,
    tokens: str = CONTAINERS["tokens"],
) -> DataFrame:
    """The messages in the endpoints' poison queues (up to ``cap``; their tokens looked up
    in the container ``tokens``), read in the driver."""
    from shared.stores.azure import AzureStorageAccount

    async with AzureStorageAccount(settings) as account:
        rows = await collect_poisoned(account, endpoint_tables, cap=cap, tokens=tokens)
    return spark.createDataFrame(rows, POISONED_SCHEMA)


async def read_dropped(
    spark: SparkSession, settings: StorageSettings, topics_container: str = CONTAINERS["topics"]
) -> DataFrame:
    """The records of events dropped for want of a subscriber (one blob per topic), read in
    the driver with one listing."""
    from shared.stores.azure import AzureStorageAccount

    async with AzureStorageAccount(settings) as account:
        rows = await collect_dropped(account, topics_container)
    return spark.createDataFrame(rows, DROPPED_SCHEMA)
