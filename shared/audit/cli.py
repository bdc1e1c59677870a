"""``python -m shared.audit``: ``run`` audits, ``export`` copies audit rows to Parquet.

Exit codes: 0 every invariant holds (or the export finished), 1 an invariant is violated,
2 anything else that stopped the audit: bad arguments, configuration (no storage settings),
storage (unreachable, refused) or Spark (cannot start, a job or an executor failed), 3 every
invariant holds but events were dropped for want of a subscriber (verdict WARN). Never 1
for an error: a script must be able to tell "the bus broke its promise" from "the audit could
not run", and both from "the app lost events to a missing subscription".
pyspark is imported only by ``run``, so ``export`` works without it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.account_in_use import announce_account
from shared.app_loader import APP_SETTING, configured_app
from shared.audit.dropped import Takers
from shared.audit.poisoned import DEFAULT_POISON_CAP
from shared.audit.store_rows import described, endpoint_states, off_tables
from shared.audit.summary import FAIL, WARN
from shared.bus.app import Store
from shared.bus.state.base import EndpointState
from shared.errors import BusError, ConfigurationError
from shared.resources import CONTAINERS, app_containers, app_name_of, app_tables
from shared.settings import (
    DEFAULT_SETTING,
    STATE_STORAGE_SETTING_NAME,
    STORAGE_SETTING_NAME,
    Settings,
    StorageSettings,
    resolve_settings,
)
from shared.stores.account import StorageAccount
from shared.system import load_system
from shared.terminal import Counters

EXIT_OK, EXIT_VIOLATED, EXIT_ERROR, EXIT_DROPPED = 0, 1, 2, 3
EXIT_USAGE = EXIT_ERROR


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def _timestamp(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {value!r}") from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _add_storage_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "storage (settings as docs/settings.md says, the account named on stderr; tables from "
        "the app)"
    )
    group.add_argument(
        "--connection-setting",
        metavar="NAME",
        help="setting holding the storage connection, read like the Functions host reads it "
        "(connection string, UseDevelopmentStorage=true, or NAME__accountName for "
        f"identity-based access); default {STORAGE_SETTING_NAME}, else {DEFAULT_SETTING}",
    )
    group.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help=f"the app whose endpoints are audited; default {APP_SETTING}, else the sample app",
    )
    group.add_argument(
        "--endpoints",
        type=_names,
        metavar="A,B",
        help="endpoint tables holding audit rows (default: the app's endpoints)",
    )
    group.add_argument(
        "--ingress-tables", type=_names, metavar="T", help="tables holding ingress records"
    )


def _add_poison_cap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--poison-cap",
        type=int,
        default=DEFAULT_POISON_CAP,
        metavar="N",
        help="read at most N poison messages over all poison queues (memory is bounded by "
        "N); the summary says which queues were cut; default %(default)s",
    )
    parser.add_argument(
        "--tokens-container",
        default=CONTAINERS["tokens"],
        metavar="NAME",
        help="the container whose tokens a poison message's signal must name; default %(default)s",
    )
    parser.add_argument(
        "--topics-container",
        default=CONTAINERS["topics"],
        metavar="NAME",
        help="the container recording events dropped for want of a subscriber; default %(default)s",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shared.audit",
        description="Verify from the audit rows that every message sent was processed exactly "
        "once, and report latency, throughput and the message flow.",
        epilog="Exit codes: 0 ok, 1 an invariant is violated, 2 a usage, configuration, "
        "storage or Spark error, 3 no invariant violated but events were dropped for want "
        "of a subscriber.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="audit (Spark): duplicates, lost and ghost messages, latency, throughput, flow",
        description="Audit with Spark. Reads Table Storage directly (one Spark task per range "
        "of partition keys) unless --input names an export.",
    )
    run.add_argument(
        "--input",
        metavar="PATH",
        help="read an export (PATH/audit and PATH/ingress) instead of Table Storage",
    )
    run.add_argument("--format", choices=("parquet", "json"), default="parquet")
    run.add_argument(
        "--system",
        type=Path,
        metavar="FILE",
        help="audit every app of a system file (docs/adopting.md): each app's audit rows from "
        "its own state store, its ingress records from the messaging account; not with "
        "--input or the storage options, which name one app",
    )
    _add_storage_options(run)
    run.add_argument(
        "--splits",
        type=int,
        default=16,
        help="partition-key ranges (Spark tasks) per table when reading Table Storage",
    )
    run.add_argument(
        "--small-table-rows",
        type=int,
        default=1000,
        metavar="N",
        help="tables of at most N rows (0-1000) are read by the driver in one query, larger "
        "ones by Spark tasks; 0 splits every table; default %(default)s",
    )
    run.add_argument(
        "--split-points",
        type=_names,
        metavar="K1,K2",
        help="explicit partition-key boundaries instead of --splits",
    )
    run.add_argument(
        "--master",
        help="Spark master (default local[*]; under spark-submit its --master applies)",
    )
    run.add_argument(
        "--lost-after",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a message unprocessed for longer than this is lost; default %(default)s",
    )
    run.add_argument("--as-of", type=_timestamp, metavar="ISO-TIME", help="'now' for --lost-after")
    run.add_argument(
        "--out",
        type=Path,
        default=Path("audit-report"),
        help="folder for summary.json and report.html; default %(default)s",
    )
    _add_poison_cap(run)
    run.add_argument("--quiet", action="store_true", help="no progress lines")

    export = commands.add_parser(
        "export",
        help="copy audit rows and ingress records to Parquet, paged and resumable",
        description="Export page by page; rerun the same command to resume after a stop.",
    )
    export.add_argument("--out", type=Path, required=True, help="destination folder")
    export.add_argument(
        "--checkpoint", type=Path, help="checkpoint file (default OUT/_checkpoint.json)"
    )
    export.add_argument("--format", choices=("parquet", "json"), default="parquet")
    export.add_argument("--page-size", type=int, default=1000, help="rows per page (1-1000)")
    export.add_argument("--max-pages", type=int, help="stop after this many pages (resume later)")
    export.add_argument(
        "--restart", action="store_true", help="ignore an existing checkpoint, start over"
    )
    _add_storage_options(export)
    _add_poison_cap(export)
    export.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    options = {STORAGE_SETTING_NAME: args.connection_setting, APP_SETTING: args.app}
    return resolve_settings(options)


def _storage(args: argparse.Namespace) -> StorageSettings:
    """The storage settings, named on stderr before the audit reads anything. An app whose
    endpoint tables are in a state account of its own is refused: the audit reads one
    account, and would find no audit row there for the messages the ingress records list."""
    settings = _settings(args)
    if settings.separate_state:
        raise ConfigurationError(
            f"the audit reads one storage account, and {STATE_STORAGE_SETTING_NAME} names a "
            f"state account of its own ({settings.state_storage_setting}) for the endpoints' "
            "audit rows, which the messaging account does not hold: audit the app with its "
            "system (`run --system FILE`, docs/audit.md), which reads each app's own store"
        )
    storage = settings.storage()
    announce_account(storage, "audit")
    return storage


def _app_name(args: argparse.Namespace) -> str | None:
    """The audited app's name (``BUS_APP_NAME``, else its ``BusApp.name``), after which its
    ingress table, performer and audits container are named."""
    settings = _settings(args)
    return app_name_of(settings.values, configured_app(settings).name)


def _tables(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    name = _app_name(args)
    endpoints = args.endpoints or configured_app(_settings(args)).running_endpoints(name)
    return list(endpoints), list(args.ingress_tables or [app_tables(name)["ingress"]])


def _run(args: argparse.Namespace) -> int:
    from shared.audit.job import AuditJob

    if args.system is not None:
        return _run_system(args)
    if not args.input and (elsewhere := _off_tables(args, _tables(args)[0])):
        # Spark reads tables through the storage SDK; these rows are not in any table.
        raise ConfigurationError(
            f"endpoints {described(elsewhere)} keep their audit rows off tables: export "
            "first (`python -m shared.audit export --out DIR`, which reads them there) and "
            "audit the export with `run --input DIR`"
        )
    job = AuditJob(
        input_path=args.input,
        file_format=args.format,
        settings=None if args.input else _storage(args),
        tables=None if args.input else _tables(args),
        **_run_options(args),
        audits_container=app_containers(None if args.input else _app_name(args))["audits"],
        takers=_takers(args),
    )
    return _exit_code(job.run().verdict)


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of ``run`` that an audit of one app and of a system take alike."""
    return {
        "splits": args.splits,
        "split_points": args.split_points,
        "small_table_rows": args.small_table_rows,
        "master": args.master,
        "as_of": args.as_of or datetime.now(UTC),
        "lost_after": timedelta(seconds=args.lost_after),
        "out": args.out,
        "quiet": args.quiet,
        "poison_cap": args.poison_cap,
        "tokens_container": args.tokens_container,
        "topics_container": args.topics_container,
    }


def _exit_code(verdict: str) -> int:
    return {FAIL: EXIT_VIOLATED, WARN: EXIT_DROPPED}.get(verdict, EXIT_OK)


ONE_APP_OPTIONS = ("input", "connection_setting", "app", "endpoints", "ingress_tables")


def _run_system(args: argparse.Namespace) -> int:
    """The audit of every app of the system file: the union of their rows through the same
    checks. Nothing is published for a console: each app's console shows its own audit."""
    from shared.audit.job import AuditJob
    from shared.audit.system_source import app_source

    given = [f"--{o.replace('_', '-')}" for o in ONE_APP_OPTIONS if getattr(args, o)]
    if given:
        raise ConfigurationError(
            f"--system reads every app of the file where it keeps its rows, not {given[0]}, "
            "which names one app's storage or tables"
        )
    apps = load_system(args.system).load()
    for app in apps:
        announce_account(app.entry.settings.storage(), f"audit (app {app.name})")
        if app.entry.settings.separate_state:
            announce_account(app.entry.settings.state_storage(), f"audit (app {app.name}) (state)")
    takers = [app.app.routes.takers_of for app in apps]
    job = AuditJob(
        system=[app_source(app) for app in apps],
        **_run_options(args),
        takers=lambda topic: sorted({e for of in takers for e in of(topic)}),
    )
    return _exit_code(job.run().verdict)


def _takers(args: argparse.Namespace) -> Takers | None:
    """Which endpoints of the audited app take a topic's events, for the fix of dropped
    events: the app the tables come from, or for an export the one named by --app or
    BUS_APP (the sample app, the default otherwise, need not be the export's)."""
    settings = _settings(args)
    if args.input and not settings.get(APP_SETTING):
        return None
    return configured_app(settings).routes.takers_of


def _export(args: argparse.Namespace) -> int:
    from shared.audit.export import ExportResult, TableProgress, export
    from shared.stores.azure import AzureStorageAccount

    settings = _storage(args)
    endpoint_tables, ingress_tables = _tables(args)

    def progress(table: str, state: TableProgress, note: str) -> None:
        note = note or f"{state.pages} pages"
        counters.update(table, state.rows, note=note, done=state.done)

    async def go() -> ExportResult:
        async with (
            AzureStorageAccount(settings) as account,
            _store_endpoints(args, endpoint_tables, account) as elsewhere,
        ):
            return await export(
                account,
                args.out,
                endpoint_tables=endpoint_tables,
                ingress_tables=ingress_tables,
                checkpoint_path=args.checkpoint,
                page_size=args.page_size,
                file_format=args.format,
                restart=args.restart,
                max_pages=args.max_pages,
                progress=progress,
                sql=elsewhere,
                poison_cap=args.poison_cap,
                tokens_container=args.tokens_container,
                topics_container=args.topics_container,
            )

    with Counters("rows", enabled=False if args.quiet else None) as counters:
        result = asyncio.run(go())
    state = "complete" if result.complete else "stopped early; rerun to resume"
    print(
        f"export: rows={sum(result.rows.values())} pages={sum(result.pages.values())} "
        f"out={args.out} {state}"
    )
    return EXIT_OK


def _off_tables(args: argparse.Namespace, endpoints: list[str]) -> dict[str, Store]:
    """Those of ``endpoints`` the configured app declares with a store other than tables
    (``shared.audit.store_rows``), and their store."""
    settings = _settings(args)
    if not settings.get(APP_SETTING):
        return {}
    return off_tables(configured_app(settings), endpoints)


def _store_endpoints(
    args: argparse.Namespace, endpoints: list[str], account: StorageAccount
) -> contextlib.AbstractAsyncContextManager[dict[str, EndpointState]]:
    """The rows of the exported endpoints that keep their audit rows off tables
    (PostgreSQL, Cosmos DB, blob documents), opened as the configured app opens them."""
    settings = _settings(args)
    if not _off_tables(args, endpoints):
        return contextlib.nullcontext({})
    return endpoint_states(configured_app(settings), settings, endpoints, account)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on bad usage and 0 for --help
        return int(e.code or 0)
    try:
        if args.poison_cap < 0:
            parser.error("--poison-cap must not be negative")
        if args.command == "run":
            if args.splits < 1:
                parser.error("--splits must be at least 1")
            if not 0 <= args.small_table_rows <= 1000:
                parser.error("--small-table-rows must be 0-1000")
            return _run(args)
        return _export(args)
    except SystemExit as e:
        return int(e.code or 0)
    except (BusError, ValueError) as e:  # configuration, storage, Spark: shared.errors
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # anything unforeseen is an error too, never "violated"
        traceback.print_exc(file=sys.stderr)
        print(f"error: the audit stopped: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
