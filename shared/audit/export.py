"""Exports audit rows and ingress records to Parquet (or JSON lines), page by page, resumably.

Layout: ``<out>/audit/<table>-<page>.parquet`` and ``<out>/ingress/<table>-<page>.parquet``,
the layout ``shared.audit.file_source`` reads. After each page is written, the checkpoint file
records the continuation token of the next page (Table Storage's tokens are plain text and
survive restarts). A run that stops anywhere resumes from the last recorded token: the page
it was writing is written again under the same file name, so it replaces the partial or
complete copy instead of adding a second one, and the export never holds a row twice.

Rows added to a table while it is exported may or may not be included (a page boundary can
fall anywhere), as with any paged read; export after the run has quiesced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from shared.audit.dropped import collect_dropped
from shared.audit.poisoned import DEFAULT_POISON_CAP, collect_poisoned
from shared.audit.rows import (
    AUDIT_COLUMNS,
    COUNT_COLUMNS,
    DELIVERY_COLUMNS,
    DELIVERY_FIELDS,
    DROPPED_COLUMNS,
    INGRESS_COLUMNS,
    POISONED_COLUMNS,
    TIMESTAMP_COLUMNS,
    Row,
    audit_row,
    ingress_row,
)
from shared.bus.ingress import INGRESS_ROW
from shared.bus.records import AUDIT_PREFIX
from shared.bus.state.base import EndpointState
from shared.errors import ConfigurationError, NotFound
from shared.resources import CONTAINERS
from shared.stores.account import StorageAccount
from shared.stores.table import Table

ExportFormat = Literal["parquet", "json"]
CHECKPOINT_VERSION = 1
DEFAULT_PAGE_SIZE = 1000
POISONED_KEY = "poisoned/queues"
DROPPED_KEY = "dropped/topics"


DELIVERIES_TYPE = pa.list_(pa.struct([pa.field(f, pa.string()) for f in DELIVERY_FIELDS]))
"""``caused`` and ``outgoing``: the typed list Spark reads as array<struct<...>>."""


def _arrow_type(column: str) -> pa.DataType:
    if column in TIMESTAMP_COLUMNS:
        return pa.timestamp("us", tz="UTC")
    if column in COUNT_COLUMNS:
        return pa.int64()
    return DELIVERIES_TYPE if column in DELIVERY_COLUMNS else pa.string()


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    return pa.schema([pa.field(c, _arrow_type(c)) for c in columns])


@dataclass
class TableProgress:
    continuation: str | None = None
    pages: int = 0
    rows: int = 0
    done: bool = False


@dataclass
class Checkpoint:
    """Where each table's export stands; saved after every page."""

    path: Path
    page_size: int
    file_format: ExportFormat
    tables: dict[str, TableProgress] = field(default_factory=dict)

    @classmethod
    def load_or_new(cls, path: Path, page_size: int, file_format: ExportFormat) -> Checkpoint:
        if not path.exists():
            return cls(path, page_size, file_format)
        try:
            data = json.loads(path.read_text())
            tables = {k: TableProgress(**v) for k, v in data["tables"].items()}
            saved_format = data["format"]
            saved_size = int(data["page_size"])
            version = data["version"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigurationError(f"checkpoint {path} is unreadable: {e}") from e
        if version != CHECKPOINT_VERSION or saved_format != file_format:
            raise ConfigurationError(
                f"checkpoint {path} belongs to a {saved_format} export (version {version}); "
                "use the same --format or start over with --restart"
            )
        # Continuation tokens name the next row, so a different page size is safe; the saved
        # one is kept only so that re-written pages get the same names and contents.
        return cls(path, saved_size, file_format, tables)

    def save(self) -> None:
        data: dict[str, Any] = {
            "version": CHECKPOINT_VERSION,
            "format": self.file_format,
            "page_size": self.page_size,
            "tables": {k: vars(v) for k, v in self.tables.items()},
        }
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(data, indent=2))
        os.replace(temporary, self.path)  # atomic: a crash leaves the old or the new one


@dataclass(frozen=True)
class ExportResult:
    rows: dict[str, int]
    pages: dict[str, int]
    complete: bool


def _write_page(
    path: Path, rows: list[Row], columns: Sequence[str], file_format: ExportFormat
) -> None:
    schema = arrow_schema(columns)
    table = pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in rows], schema)
    temporary = path.with_name(path.name + ".tmp")
    if file_format == "parquet":
        pq.write_table(table, temporary)
    else:
        with temporary.open("w") as f:
            for record in table.to_pylist():
                f.write(json.dumps(record, default=_iso) + "\n")
    os.replace(temporary, path)


def _iso(value: object) -> str:
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


async def export(
    account: StorageAccount,
    out: Path,
    *,
    endpoint_tables: Sequence[str],
    ingress_tables: Sequence[str],
    checkpoint_path: Path | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    file_format: ExportFormat = "parquet",
    restart: bool = False,
    max_pages: int | None = None,
    progress: Callable[[str, TableProgress, str], None] = lambda *_: None,
    sql: Mapping[str, EndpointState] | None = None,
    poison_cap: int = DEFAULT_POISON_CAP,
    tokens_container: str = CONTAINERS["tokens"],
    topics_container: str = CONTAINERS["topics"],
) -> ExportResult:
    """Export every audit row of ``endpoint_tables`` and every ingress record of
    ``ingress_tables``. ``max_pages`` stops after that many pages in this call (the export is
    then incomplete and a later call resumes it). ``progress`` hears of every page: the
    table (``audit/<name>`` or ``ingress/<name>``), where its export stands, and a note.
    Endpoints in ``sql`` keep their audit rows in PostgreSQL: those are read from there, into
    the same layout. Of the poison queues, up to ``poison_cap`` messages are exported, each
    checked (``shared.audit.poisoned``; their tokens in ``tokens_container``), and the
    records of events dropped for want of a subscriber (``topics_container``)."""
    sql = sql or {}
    if not 1 <= page_size <= 1000:
        raise ConfigurationError("page size must be 1-1000 (Table Storage's page limit)")
    checkpoint = _prepare(out, checkpoint_path, page_size, file_format, restart)
    extension = "parquet" if file_format == "parquet" else "json"
    written = 0
    jobs = [("audit", t) for t in endpoint_tables] + [("ingress", t) for t in ingress_tables]
    for kind, table_name in jobs:
        key = f"{kind}/{table_name}"
        state = checkpoint.tables.setdefault(key, TableProgress())
        folder = out / kind
        table = account.table(table_name)
        while not state.done:
            if max_pages is not None and written >= max_pages:
                return ExportResult(*_totals(checkpoint), complete=False)
            note = ""
            try:
                if kind == "audit" and table_name in sql:
                    rows, columns, continuation = await _sql_page(
                        sql[table_name], checkpoint, state
                    )
                else:
                    rows, columns, continuation = await _page(table, kind, checkpoint, state)
            except NotFound:
                note = "table does not exist; nothing to export"
                rows, columns, continuation = [], AUDIT_COLUMNS, None
            if rows:
                name = f"{table_name}-{state.pages:06d}.{extension}"
                _write_page(folder / name, rows, columns, file_format)
                state.pages += 1
                state.rows += len(rows)
            state.continuation = continuation
            state.done = continuation is None
            checkpoint.save()
            written += 1
            progress(key, state, note)
    # The messages in the endpoints' poison queues, up to the cap (and a marker row per queue
    # cut there), so that an audit of the export tells parked deliveries from lost ones; and
    # the records of events dropped for want of a subscriber, so that it reports them too.
    await _export_snapshot(
        POISONED_KEY,
        out,
        "poisoned",
        "poison",
        lambda: collect_poisoned(account, endpoint_tables, cap=poison_cap, tokens=tokens_container),
        POISONED_COLUMNS,
        checkpoint,
        extension,
        progress,
    )
    await _export_snapshot(
        DROPPED_KEY,
        out,
        "dropped",
        "dropped",
        lambda: collect_dropped(account, topics_container),
        DROPPED_COLUMNS,
        checkpoint,
        extension,
        progress,
    )
    return ExportResult(*_totals(checkpoint), complete=True)


async def _export_snapshot(
    key: str,
    out: Path,
    folder_name: str,
    stem: str,
    collect: Callable[[], Awaitable[list[Row]]],
    columns: Sequence[str],
    checkpoint: Checkpoint,
    extension: str,
    progress: Callable[[str, TableProgress, str], None],
) -> None:
    """What ``collect`` reads in one go (not paged like the tables), as one file in
    ``out/folder_name``, once per export: a resumed export keeps what it already wrote."""
    state = checkpoint.tables.setdefault(key, TableProgress())
    if state.done:
        return
    rows = await collect()
    folder = out / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    if rows:
        _write_page(folder / f"{stem}-000000.{extension}", rows, columns, checkpoint.file_format)
        state.pages, state.rows = 1, len(rows)
    state.done = True
    checkpoint.save()
    progress(key, state, "")


async def _page(
    table: Table, kind: str, checkpoint: Checkpoint, state: TableProgress
) -> tuple[list[Row], Sequence[str], str | None]:
    if kind == "audit":
        page = await table.query(
            row_key_prefix=AUDIT_PREFIX,
            page_size=checkpoint.page_size,
            continuation=state.continuation,
        )
        rows = [audit_row(table.name, e.partition_key, e.properties) for e in page.entities]
        return rows, AUDIT_COLUMNS, page.continuation
    page = await table.query(
        row_keys=[INGRESS_ROW], page_size=checkpoint.page_size, continuation=state.continuation
    )
    rows = [ingress_row(table.name, e.partition_key, e.properties) for e in page.entities]
    return rows, INGRESS_COLUMNS, page.continuation


async def _sql_page(
    store: EndpointState, checkpoint: Checkpoint, state: TableProgress
) -> tuple[list[Row], Sequence[str], str | None]:
    entities, continuation = await store.audit_page(state.continuation, checkpoint.page_size)
    rows = [audit_row(store.name, e.partition_key, e.properties) for e in entities]
    return rows, AUDIT_COLUMNS, continuation


def _prepare(
    out: Path,
    checkpoint_path: Path | None,
    page_size: int,
    file_format: ExportFormat,
    restart: bool,
) -> Checkpoint:
    path = checkpoint_path or out / "_checkpoint.json"
    if restart:
        path.unlink(missing_ok=True)
    for folder in (out / "audit", out / "ingress"):
        folder.mkdir(parents=True, exist_ok=True)
    return Checkpoint.load_or_new(path, page_size, file_format)


def _totals(checkpoint: Checkpoint) -> tuple[dict[str, int], dict[str, int]]:
    return (
        {k: v.rows for k, v in checkpoint.tables.items()},
        {k: v.pages for k, v in checkpoint.tables.items()},
    )
