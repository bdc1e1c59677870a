"""``python -m shared.bulk``: ``send`` turns every row of an input into one message, exactly
once per row; ``replay`` sends a selection of poisoned messages back to their queues.

Exit codes: 0 every row was sent (or found sent by an earlier run); 1 the job ran but some
rows were rejected (see OUT/rejects) or, for a replay, some could not be replayed; 2 the job
could not run: bad arguments or input columns, configuration, storage, or Spark.
Settings are read like the other tools' (docs/settings.md, "Where settings come from"), and
the storage account used is named on stderr before the job starts; the app is ``BUS_APP``
(``--app``), else the sample app.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from shared.account_in_use import announce_account
from shared.app_loader import APP_SETTING, DEFAULT_APP, configured_app
from shared.bulk.inputs import FORMATS, input_format
from shared.bulk.summary import BulkSummary
from shared.config import build_config
from shared.errors import BusError
from shared.settings import DEFAULT_SETTING, STORAGE_SETTING_NAME, resolve_settings

EXIT_OK, EXIT_REJECTS, EXIT_ERROR = 0, 1, 2


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, metavar="PATH", help="file or folder to read")
    parser.add_argument(
        "--format", choices=FORMATS, help="default: from the suffix (.json, .csv), else parquet"
    )
    parser.add_argument(
        "--job",
        required=True,
        metavar="NAME",
        help="the job's name (1-64 letters, digits, '.', '_', '-'): part of every row's "
        "idempotency key; run it again under the same name to resume, never to send anew",
    )
    parser.add_argument(
        "--out", metavar="PATH", help="folder for outcomes, rejects, summary.json (bulk-JOB)"
    )
    parser.add_argument(
        "--master", help="Spark master (default local[*,4]; under spark-submit its own)"
    )
    parser.add_argument(
        "--app", metavar="MODULE:ATTR", help=f"the app (default {APP_SETTING}, else sample)"
    )
    parser.add_argument(
        "--connection-setting",
        metavar="NAME",
        help=f"setting holding the storage connection (default {STORAGE_SETTING_NAME}, "
        f"else {DEFAULT_SETTING})",
    )
    bar = parser.add_mutually_exclusive_group()
    bar.add_argument("--progress", action="store_true", default=None, help="always draw it")
    bar.add_argument("--no-progress", dest="progress", action="store_false", help="never")
    parser.add_argument("--quiet", action="store_true", help="only the summary line")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shared.bulk",
        description="Bulk sends through Spark, exactly once per row (docs/bulk.md).",
        epilog="Exit codes: 0 done, 1 some rows rejected or uncertain (OUT/rejects), "
        "2 could not run.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    send = commands.add_parser(
        "send",
        help="each row of the input becomes one message, exactly once per row",
        description="Each row becomes one message through the ingress, its idempotency key "
        "JOB:KEY. Rows that fail a check are written to OUT/rejects with why.",
    )
    _common(send)
    send.add_argument("--type", required=True, help="message type, e.g. PlaceOrder")
    send.add_argument("--to", metavar="ENDPOINT", help="a command's endpoint (default: its one)")
    send.add_argument("--key-column", required=True, metavar="C", help="the row's unique key")
    send.add_argument(
        "--body-columns", nargs="+", metavar="C", help="the message's fields (default: all)"
    )
    send.add_argument(
        "--concurrency", type=_positive, default=16, help="sends at a time per task (%(default)s)"
    )
    send.add_argument(
        "--rows-per-task",
        type=_positive,
        default=1000,
        help="partition size; at least one task per core (%(default)s)",
    )
    replay = commands.add_parser(
        "replay",
        help="send poisoned messages back to their queues, each processed once",
        description="The input names poisoned messages by endpoint and message_id: "
        "`bus poison list --json` output, or an audit export's poisoned folder.",
    )
    _common(replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on bad usage and 0 for --help
        return int(e.code or 0)
    try:
        summary = _run(args)
    except (BusError, ValueError) as e:  # usage, configuration, storage, Spark: shared.errors
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # anything unforeseen stops the job, with its trace
        traceback.print_exc(file=sys.stderr)
        print(f"error: the bulk job stopped: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if summary.complete else EXIT_REJECTS


def _run(args: argparse.Namespace) -> BulkSummary:
    from shared.bulk.job import JobOptions, SendOptions, run_replay, run_send

    settings = resolve_settings(
        {STORAGE_SETTING_NAME: args.connection_setting, APP_SETTING: args.app}
    )
    # The app's name decides its ingress table, where the job's records go.
    config = build_config(settings, app_name=configured_app(settings).name)
    storage = config.require_storage()
    announce_account(storage, "bulk")
    options = JobOptions(
        job=args.job,
        input_path=args.input,
        file_format=input_format(args.input, args.format),
        out=args.out or f"bulk-{args.job}",
        storage=storage,
        app_reference=settings.get(APP_SETTING) or DEFAULT_APP,
        master=args.master,
        progress=args.progress,
        quiet=args.quiet,
        bus=config.bus,
    )
    if args.command == "replay":
        return run_replay(options)
    send = SendOptions(
        type_name=args.type,
        key_column=args.key_column,
        to=args.to,
        body_columns=tuple(args.body_columns or ()),
        concurrency=args.concurrency,
        rows_per_task=args.rows_per_task,
    )
    return run_send(options, send)
