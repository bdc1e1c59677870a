"""The audit job: read, check, write ``summary.json`` and ``report.html``, print the summary.

Runnable as a file under ``spark-submit`` with the arguments of ``python -m shared.audit run``:

    spark-submit --master yarn shared/audit/job.py --input abfss://.../audit-export

On a cluster the ``shared`` package is zipped and shipped to the executors automatically;
they need ``azure-data-tables`` (and ``azure-identity`` for identity-based access) only when
reading Table Storage directly.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from shared.audit.compute import AuditOptions, run_audit
from shared.audit.console import render_console
from shared.audit.dropped import Takers
from shared.audit.file_source import FileFormat, read_dropped_files, read_files
from shared.audit.poisoned import DEFAULT_POISON_CAP
from shared.audit.published import MAX_SUMMARY_CHARS, PublishedAudit, publish
from shared.audit.report import render_html
from shared.audit.session import (
    SparkFailure,
    get_session,
    is_local,
    remove_shipped,
    ship_package,
)
from shared.audit.summary import AuditSummary
from shared.audit.system_source import AppSource, read_system
from shared.audit.table_source import read_dropped, read_poisoned, read_tables
from shared.errors import ConfigurationError, OutcomeUnknown, StorageError
from shared.resources import CONTAINERS
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.terminal import StageLog

Frames = tuple[DataFrame, DataFrame, DataFrame, DataFrame]
"""(audit, ingress, poisoned, dropped)."""


def under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands its port to the Python driver."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


@dataclass
class AuditJob:
    as_of: datetime
    lost_after: timedelta
    out: Path
    input_path: str | None = None
    file_format: FileFormat = "parquet"
    settings: StorageSettings | None = None
    tables: tuple[list[str], list[str]] | None = None
    splits: int = 16
    split_points: list[str] | None = None
    small_table_rows: int = 1000
    master: str | None = None
    quiet: bool = False
    poison_cap: int = DEFAULT_POISON_CAP
    tokens_container: str = CONTAINERS["tokens"]
    topics_container: str = CONTAINERS["topics"]
    audits_container: str = CONTAINERS["audits"]
    takers: Takers | None = None
    """Topic -> the audited app's endpoints that take its events (None: app not known)."""
    system: list[AppSource] | None = None
    """The apps of a system, each read where it keeps its rows (instead of ``settings``)."""

    def run(self) -> AuditSummary:
        progress = StageLog(enabled=not self.quiet)
        master = self.master or (None if under_spark_submit() else "local[*]")
        progress(f"starting Spark ({master or 'from spark-submit'})")
        spark = get_session(master)
        shipped = None if is_local(spark) else ship_package(spark)
        try:
            audit, ingress, poisoned, dropped = self._read(spark, progress)
            summary = run_audit(
                audit,
                ingress,
                AuditOptions(as_of=self.as_of, lost_after=self.lost_after, takers=self.takers),
                progress,
                poisoned,
                dropped,
            )
        except (Py4JError, PySparkException) as e:  # a job, a task or an executor failed
            raise SparkFailure(f"the Spark job failed: {_first_line(e)}") from e
        finally:
            if shipped is not None:
                remove_shipped(shipped)
        html = write_outputs(summary, self.out)
        progress(f"wrote {self.out / 'summary.json'} and {self.out / 'report.html'}")
        if self.settings is not None and self.input_path is None:
            self._publish(summary, html, progress)
        print(render_console(summary), flush=True)
        return summary

    def _read(self, spark: SparkSession, progress: StageLog) -> Frames:
        """(audit, ingress, poisoned, dropped): from an export, a system's apps, or one
        account."""
        if self.input_path is not None:
            progress(f"reading {self.file_format} export at {self.input_path}")
            audit, ingress, poisoned = read_files(spark, self.input_path, self.file_format)
            return (
                audit,
                ingress,
                poisoned,
                read_dropped_files(spark, self.input_path, self.file_format),
            )
        if self.system:
            return self._read_system(spark, self.system, progress)
        if self.settings is None or self.tables is None:
            raise ConfigurationError("reading Table Storage needs settings and tables")
        endpoint_tables, ingress_tables = self.tables
        progress(
            f"reading Table Storage ({self.settings.describe()}): "
            f"{len(endpoint_tables)} endpoint tables, {self.splits} ranges each "
            "where a table holds more than a page"
        )
        poisoned = asyncio.run(
            read_poisoned(
                spark, self.settings, endpoint_tables, self.poison_cap, self.tokens_container
            )
        )
        dropped = asyncio.run(read_dropped(spark, self.settings, self.topics_container))
        audit, ingress = read_tables(
            spark,
            self.settings,
            endpoint_tables=endpoint_tables,
            ingress_tables=ingress_tables,
            splits=self.splits,
            boundaries=self.split_points,
            small_table_rows=self.small_table_rows,
        )
        return audit, ingress, poisoned, dropped

    def _read_system(
        self, spark: SparkSession, apps: list[AppSource], progress: StageLog
    ) -> Frames:
        """Every app's rows from where it keeps them, and the dropped events' records from
        the messaging account the apps share; what was read, said per app."""
        for app in apps:
            progress(f"reading {app.describe()}")
        frames = read_system(
            spark,
            apps,
            splits=self.splits,
            boundaries=self.split_points,
            small_table_rows=self.small_table_rows,
            poison_cap=self.poison_cap,
            tokens_container=self.tokens_container,
        )
        dropped = asyncio.run(read_dropped(spark, apps[0].messaging, self.topics_container))
        audit_counts = _counts(frames.audit)
        ingress_counts = _counts(frames.ingress)
        for app in apps:
            audited = sum(audit_counts.get(t, 0) for t in app.endpoints)
            received = sum(ingress_counts.get(t, 0) for t in app.ingress_tables)
            progress(f"app {app.name}: read {audited} audit rows, {received} ingress records")
        return frames.audit, frames.ingress, frames.poisoned, dropped

    def _publish(self, summary: AuditSummary, html: str, progress: StageLog) -> None:
        """The verdict and report for the operator console (``shared.audit.published``). A
        failure to publish leaves the audit's result as it is: it is said, not raised."""
        if self.settings is None:
            return
        audit = PublishedAudit(
            at=self.as_of, verdict=summary.verdict, summary=summary.one_line()[:MAX_SUMMARY_CHARS]
        )
        try:
            asyncio.run(_publish(self.settings, self.audits_container, audit, html))
        except (StorageError, OutcomeUnknown, ConfigurationError) as e:
            print(f"audit: the verdict was not published for the console: {e}", file=sys.stderr)
        else:
            progress(f"published the verdict to container {self.audits_container}")


async def _publish(
    settings: StorageSettings, container: str, audit: PublishedAudit, html: str
) -> None:
    async with AzureStorageAccount(settings) as account:
        await publish(account.blob_container(container), audit, html)


def _counts(frame: DataFrame) -> dict[str, int]:
    """Rows per table."""
    return {str(r["table"]): int(r["count"]) for r in frame.groupBy("table").count().collect()}


def _first_line(error: BaseException) -> str:
    """Spark's errors carry the whole JVM stack; the cause is in its first lines."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip() and not x.startswith("\tat ")]
    return " ".join(lines[:3])[:800] or type(error).__name__


def write_outputs(summary: AuditSummary, out: Path) -> str:
    """Write ``summary.json`` and ``report.html`` to ``out``; the report's HTML."""
    out.mkdir(parents=True, exist_ok=True)
    html = render_html(summary)
    (out / "summary.json").write_text(summary.to_json() + "\n")
    (out / "report.html").write_text(html)
    return html


if __name__ == "__main__":
    from shared.audit.cli import main

    sys.exit(main(["run", *sys.argv[1:]]))
