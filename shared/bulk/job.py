"""The bulk jobs on the driver: read the input, plan the partitions, let the tasks send, and
write what became of every row.

Runnable as a file under ``spark-submit`` with the arguments of ``python -m shared.bulk``:

    spark-submit --master spark://host:7077 shared/bulk/job.py send --input orders.parquet \\
        --type PlaceOrder --to orders --key-column order_id --job reprice-2026-11

Outputs, in ``--out``: ``outcomes`` (Parquet, one row per input row: its key, idempotency
key, status, reason and message ids), ``rejects`` (JSON lines: each rejected row with its
reason) and ``summary.json``. Sending is one Spark job whose tasks write ``outcomes``; the
counts and the rejects are read back from it, so nothing is sent twice to count it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

if __package__ in (None, ""):  # run as a file: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from py4j.protocol import Py4JError
from pyspark import RDD
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from shared.app_loader import load_app
from shared.audit.session import SparkFailure, get_session, is_local, remove_shipped, ship_package
from shared.bulk.inputs import CORRUPT_COLUMN, Format, read_input
from shared.bulk.keys import check_job_name
from shared.bulk.outcomes import OUTCOME_COLUMNS, Outcome
from shared.bulk.progress import job_progress
from shared.bulk.replay import MAX_MESSAGE_ID_CHARS, ReplayTask, replay_partition
from shared.bulk.rows import body_columns, check_target
from shared.bulk.send import (
    DUPLICATE_COUNT_COLUMN,
    RequestCounter,
    SendTask,
    bus_fields,
    send_partition,
)
from shared.bulk.summary import BulkSummary
from shared.bus.config import BusConfig
from shared.config import default_bus_config
from shared.http_ingress import BadRequest
from shared.settings import StorageSettings
from shared.terminal import StageLog

OUTCOME_SCHEMA = StructType(
    [
        StructField(name, ArrayType(StringType()) if name == "message_ids" else StringType())
        for name in OUTCOME_COLUMNS
    ]
)
DEFAULT_MASTER = "local[*,4]"
"""Local mode with Spark's own task retries (4 attempts, as ``spark.task.maxFailures`` gives
a cluster): plain ``local[*]`` fails the job on the first failed task."""


def under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands its port to the Python driver."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


@dataclass(frozen=True)
class JobOptions:
    """What every bulk job needs: where, what, and how it reports."""

    job: str
    input_path: str
    file_format: Format
    out: str
    storage: StorageSettings
    app_reference: str
    master: str | None = None
    progress: bool | None = None
    quiet: bool = False
    bus: BusConfig = field(default_factory=default_bus_config)
    """The driver's bus configuration (``AppConfig.bus``): resource names and the tunables a
    send obeys, handed to the tasks."""


@dataclass(frozen=True)
class SendOptions:
    type_name: str
    key_column: str
    to: str | None = None
    body_columns: tuple[str, ...] = ()
    """Empty: every column of the input."""
    concurrency: int = 16
    """Rows each task sends at a time."""
    rows_per_task: int = 1000


def run_send(
    options: JobOptions, send: SendOptions, spark: SparkSession | None = None
) -> BulkSummary:
    """``python -m shared.bulk send``: every row of the input, one message exactly once."""
    check_job_name(options.job)
    target = check_target(load_app(options.app_reference), send.type_name, send.to)
    with _Session(options, spark) as (session, log):
        frame = read_input(session, options.input_path, options.file_format)
        columns = [c for c in frame.columns if c != CORRUPT_COLUMN]
        body = body_columns(target, columns, send.key_column, send.body_columns)
        rows = frame.count()
        partitions = max(
            1, session.sparkContext.defaultParallelism, math.ceil(rows / send.rows_per_task)
        )
        log(f"read {rows} rows from {options.input_path}; sending in {partitions} partitions")
        key = F.col(_quoted(send.key_column))
        # Hash-partitioned by key, so the count of rows sharing a key needs no second shuffle.
        keyed = frame.repartition(partitions, key).withColumn(
            DUPLICATE_COUNT_COLUMN, F.count(F.lit(1)).over(Window.partitionBy(key))
        )
        task = SendTask(
            storage=options.storage,
            app_reference=options.app_reference,
            job=options.job,
            target=target,
            key_column=send.key_column,
            body_columns=body,
            concurrency=send.concurrency,
            bus_fields=bus_fields(options.bus),
        )
        return _execute(
            session, options, log, keyed, partial(send_partition, task), rows, partitions, "send"
        )


def run_replay(options: JobOptions, spark: SparkSession | None = None) -> BulkSummary:
    """``python -m shared.bulk replay``: the poisoned messages the input names, each sent
    back to its queue."""
    check_job_name(options.job)
    app = load_app(options.app_reference)
    with _Session(options, spark) as (session, log):
        frame = read_input(session, options.input_path, options.file_format)
        for column in ("endpoint", "message_id"):
            if column not in frame.columns:
                raise BadRequest(
                    f"the selection has no column {column!r}; columns: {frame.columns}"
                )
        rows = frame.count()
        checked = frame.select(
            F.col("endpoint").cast("string").alias("endpoint"),
            F.col("message_id").cast("string").alias("message_id"),
            F.to_json(F.struct(*[F.col(_quoted(c)) for c in frame.columns])).alias("row"),
        ).withColumn("reason", _selection_problem(sorted(app.endpoints)))
        rejects = checked.filter(F.col("reason").isNotNull()).select(
            F.concat_ws("/", "endpoint", "message_id").alias("row_key"),
            F.lit(None).cast("string").alias("idempotency_key"),
            F.lit("rejected").alias("status"),
            "reason",
            F.array().cast("array<string>").alias("message_ids"),
            "row",
        )
        groups = (
            checked.filter(F.col("reason").isNull())
            .groupBy("endpoint")
            .agg(F.collect_set("message_id").alias("ids"))
        )
        endpoints = max(1, groups.count())
        log(f"read {rows} selection rows from {options.input_path}; {endpoints} endpoints")
        task = ReplayTask(options.storage, options.bus.parked_container)
        selected = groups.repartition(endpoints, "endpoint")
        return _execute(
            session,
            options,
            log,
            selected,
            partial(replay_partition, task),
            rows,
            endpoints,
            "replay",
            extra=rejects,
        )


class _Session:
    """The Spark session of a run (the given one, spark-submit's, or a new one on the master),
    the package shipped to a cluster's executors, and Spark's failures as ``SparkFailure``."""

    def __init__(self, options: JobOptions, spark: SparkSession | None) -> None:
        self.options, self.spark = options, spark
        self.log = StageLog(enabled=not options.quiet)
        self.shipped: Path | None = None

    def __enter__(self) -> tuple[SparkSession, StageLog]:
        spark = self.spark
        if spark is None:
            master = self.options.master or (None if under_spark_submit() else DEFAULT_MASTER)
            self.log(f"starting Spark ({master or 'from spark-submit'})")
            spark = get_session(master, app_name=f"bus-bulk-{self.options.job}")
        self.shipped = None if is_local(spark) else ship_package(spark)
        return spark, self.log

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if self.shipped is not None:
            remove_shipped(self.shipped)
        if isinstance(error, Py4JError | PySparkException):  # a job, a task or an executor
            raise SparkFailure(f"the Spark job failed: {_first_line(error)}") from error


def _execute(
    session: SparkSession,
    options: JobOptions,
    log: StageLog,
    frame: DataFrame,
    work: Callable[[RequestCounter, Iterable[Any]], Iterator[Outcome]],
    rows: int,
    partitions: int,
    command: str,
    extra: DataFrame | None = None,
) -> BulkSummary:
    """Run ``work`` over ``frame``'s partitions as the one job that sends, writing its
    outcomes; then count them, write the rejects and the summary."""
    requests = session.sparkContext.accumulator(0)
    rdd: RDD[Outcome] = frame.rdd.mapPartitions(partial(work, requests))
    outcomes = session.createDataFrame(rdd, OUTCOME_SCHEMA)
    if extra is not None:
        outcomes = outcomes.unionByName(extra)
    outcomes_path = _child(options.out, "outcomes")
    started = time.perf_counter()
    label = f"bulk {command} {options.job}"
    enabled = False if options.quiet else options.progress
    with job_progress(session.sparkContext, label, label, partitions, enabled=enabled):
        outcomes.write.mode("overwrite").parquet(outcomes_path)
    send_seconds = time.perf_counter() - started
    written = session.read.parquet(outcomes_path)
    counts = {
        str(r["status"]): int(r["count"]) for r in written.groupBy("status").count().collect()
    }
    rejects_path = _child(options.out, "rejects")
    written.filter(F.col("status").isin("rejected", "uncertain")).select(
        "row_key", "status", "reason", "row"
    ).coalesce(1).write.mode("overwrite").option("ignoreNullFields", False).json(rejects_path)
    summary = BulkSummary.of(
        counts,
        command=command,
        job=options.job,
        input=options.input_path,
        out=options.out,
        read=rows,
        requests=int(requests.value),
        partitions=partitions,
        send_seconds=round(send_seconds, 2),
        seconds=round(time.perf_counter() - log.started, 2),
    )
    if _is_local_path(options.out):
        Path(options.out, "summary.json").write_text(summary.to_json() + "\n")
    log(f"wrote {outcomes_path}, {rejects_path} and the summary")
    print(summary.line(), flush=True)
    return summary


def _selection_problem(endpoints: list[str]) -> Column:
    """Why a selection row names no poisoned message to look for, or null."""
    endpoint, message_id = F.col("endpoint"), F.col("message_id")
    return (
        F.when(endpoint.isNull() | (endpoint == ""), F.lit("the row names no endpoint"))
        .when(
            ~endpoint.isin(endpoints),
            F.concat(
                F.lit("endpoint "), endpoint, F.lit(f" is not an endpoint of the app ({endpoints})")
            ),
        )
        .when(message_id.isNull() | (message_id == ""), F.lit("the row names no message id"))
        .when(
            F.length(message_id) > MAX_MESSAGE_ID_CHARS,
            F.lit(f"the message id is longer than {MAX_MESSAGE_ID_CHARS} characters"),
        )
    )


def _quoted(column: str) -> str:
    """A column name as Spark's ``col`` reads it literally (dots and backticks included)."""
    return "`" + column.replace("`", "``") + "`"


def _child(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


def _is_local_path(path: str) -> bool:
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter


def _first_line(error: BaseException) -> str:
    """Spark's errors carry the whole JVM stack; the cause is in its first lines."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip() and not x.startswith("\tat ")]
    return " ".join(lines[:3])[:800] or type(error).__name__


if __name__ == "__main__":
    from shared.bulk.cli import main

    sys.exit(main())
