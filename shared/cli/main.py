"""``bus``: the operator command line (also ``python -m shared.cli``).

Settings are resolved like the function app's (``shared.settings``; the order of the sources
is in docs/settings.md, "Where settings come from"). The app is the one named by ``BUS_APP``
(``--app``; default the sample app). Storage: the connection setting named by ``--setting``
(default ``BUS_STORAGE_SETTING``, else AzureWebJobsStorage), or a connection string read from
``--connection-string-file PATH``. ``--connection-string`` still works but warns on stderr:
the account key would be in the process list for every user of the machine. A connection
setting that no source sets, or whose settings are ambiguous, is an error, never a silent
choice. Every command that touches storage first names on stderr the account it uses and
where the connection came from (``shared.account_in_use``). Every app setting
(docs/settings.md) and the host.json of the current folder are read once, before the command
runs (``shared.config``): a bad value is a configuration error (exit 3) naming the setting.

Exit codes: 0 done; 1 failed (storage error, unreachable or refused; or nothing found by
``poison show`` or ``state``; or a violation found by ``verify``); 2 bad usage or input;
3 configuration (no connection, an app that cannot be loaded, a stale resources file,
resources missing); 4 ``status --check`` found poison messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from shared.app_loader import APP_SETTING, DEFAULT_APP, configured_app
from shared.bus import BusApp, Command, Event
from shared.bus.discard import DiscardFilter
from shared.cli import (
    commands,
    console_command,
    discard_command,
    poison_commands,
    poison_show,
    state_command,
)
from shared.cli.opened import opened_worker
from shared.cli.system_status import system_status_command
from shared.cli.verify_command import add_verify_parser, check_verify_usage, verify_command
from shared.config import AppConfig, build_config
from shared.connection_sources import COMMAND_LINE, ConnectionSource
from shared.errors import (
    BusError,
    CancelRefused,
    ConfigurationError,
    InvalidName,
    MessageTooLarge,
    NotFound,
    OutcomeUnknown,
    StorageError,
)
from shared.http_ingress import BadRequest, message_types
from shared.logsafe import shown
from shared.resources import RESOURCES_FILE
from shared.runtime import Worker
from shared.settings import (
    LOCAL_SETTINGS_FILE,
    STORAGE_SETTING_NAME,
    Settings,
    StorageSettings,
    resolve_settings,
)

WITHOUT_STORAGE = ("resources",)
"""Commands that touch no storage."""
BEFORE_PROVISIONING = ("provision", "status")
"""Commands that run, and report, while resources are missing."""

EPILOG = """exit codes: 0 done, 1 failed (storage; verify: a violation), 2 bad usage or input,
3 configuration (no connection or resources missing), 4 status --check found poison messages

examples:
  bus resources > infra/resources.json
  bus provision
  bus send PlaceOrder --to orders --key order-1 \\
      --body '{"order_id": "order-1", "customer": "ada", "amount_cents": 1250}'
  bus publish OrderPlaced --key op-1 \\
      --body '{"order_id": "o1", "customer": "ada", "amount_cents": 100}'
  bus cancel --key reminder-1
  bus status --check
  bus poison list payments
  bus poison show 0b0c2a9e-4a6b-5f63-9d1e-7c3f2b8e1a44
  bus state orders order-1
  bus replay payments --type ChargePayment --dry-run
  bus cleanup
  bus verify --app myapp.app:app --budget 60"""


def parser(app: BusApp | None = None) -> argparse.ArgumentParser:
    """The command line; with ``app`` the send and publish help list its message types."""
    p = argparse.ArgumentParser(
        prog="bus",
        description="Operate the exactly-once bus: send, publish, subscriptions, status, "
        "poison messages, endpoint state, replay and cleanup; verify an app in the simulator.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    given = p.add_mutually_exclusive_group()
    given.add_argument(
        "--connection-string",
        help="storage connection string (overrides settings); visible in the process list, "
        "so prefer the environment or --connection-string-file",
    )
    given.add_argument(
        "--connection-string-file",
        type=Path,
        metavar="PATH",
        help="read the storage connection string from this file (overrides settings)",
    )
    p.add_argument(
        "--setting",
        help=f"connection setting name (default: {STORAGE_SETTING_NAME}, else AzureWebJobsStorage)",
    )
    p.add_argument(
        "--app",
        help=f"the app, package.module:attribute (default: {APP_SETTING}, else the sample app)",
    )
    p.add_argument(
        "--settings-file",
        type=Path,
        default=LOCAL_SETTINGS_FILE,
        help="read Values from this file when present (default: %(default)s)",
    )
    _progress_options(p, default=None)
    sub = p.add_subparsers(dest="command", required=True, metavar="command")

    sub.add_parser(
        "resources", help="print infra/resources.json for the app (bus resources > infra/...)"
    )
    s = sub.add_parser("provision", help="create every queue, container and table (idempotent)")
    s.add_argument(
        "--resources-file",
        type=Path,
        default=RESOURCES_FILE,
        help="must match the app: what Bicep provisions (default: %(default)s in the "
        "current folder, where `bus resources > infra/resources.json` writes it)",
    )

    handled = message_types(app) if app is not None else {}
    for name, verb, kind in (
        ("send", "send a command", Command),
        ("publish", "publish an event", Event),
    ):
        types = ", ".join(sorted(n for n, m in handled.items() if issubclass(m, kind)))
        s = sub.add_parser(
            name,
            help=f"{verb} exactly once per --key",
            description=f"Types of the app: {types}" if types else None,
        )
        s.add_argument("type", help="message type name, e.g. PlaceOrder")
        s.add_argument(
            "--body", required=True, help="JSON object, @file.json, or @- to read it from stdin"
        )
        s.add_argument("--key", help="idempotency key (default: a new one, printed)")
        s.add_argument(
            "--delay",
            help="not processed before this much time has passed: seconds, or e.g. 90s, "
            "10m, 2h, 30d",
        )
        if name == "send":
            s.add_argument("--to", help="destination endpoint (default: the one handling it)")

    s = sub.add_parser(
        "cancel",
        help="cancel what was sent under --key, unless it was processed already",
        description="Answers cancelled (it will never be processed), processed (it was "
        "already: nothing undone) or not_found; exit 1 when the scope sent nothing under the key.",
    )
    s.add_argument("--key", required=True, help="the idempotency key it was sent with")
    s.add_argument(
        "--scope",
        default="cli",
        help="whose key it is: cli (bus send, the default), http (the HTTP ingress with "
        "function keys), http:<caller> (an Entra caller), bulk:<job>",
    )
    s = sub.add_parser("subscribe", help="subscribe an endpoint to a topic (idempotent)")
    s.add_argument("--all", action="store_true", help="every endpoint to its events' topics")
    s.add_argument("topic", nargs="?", help="e.g. orderplaced")
    s.add_argument("endpoint", nargs="?", help="e.g. loyalty")
    s = sub.add_parser("unsubscribe", help="unsubscribe an endpoint from a topic (idempotent)")
    s.add_argument("topic", nargs="?")
    s.add_argument("endpoint", nargs="?")

    s = sub.add_parser(
        "status", help="queue depths, poison counts, each mode's dedup records, tokens"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument(
        "--check",
        action="store_true",
        help="exit 4 when poison messages wait or a handling endpoint is not subscribed",
    )
    s.add_argument(
        "--system",
        type=Path,
        metavar="FILE",
        help="every app the system file lists (infra/system.parameters.json, or "
        '{"apps": [...]}), each with its own settings; the exit code is the worst app\'s',
    )

    s = sub.add_parser("poison", help="inspect poison messages")
    poison = s.add_subparsers(dest="poison_command", required=True, metavar="subcommand")
    s = poison.add_parser(
        "list", help="poison messages with why they were parked (looked at, not taken)"
    )
    s.add_argument("endpoints", nargs="*", help="endpoints (default: every one)")
    s.add_argument("--json", action="store_true", help="machine-readable output, reasons whole")
    s.add_argument(
        "--page-size",
        type=int,
        default=poison_commands.PAGE_SIZE,
        help="messages listed per endpoint (default %(default)s); the next page's command "
        "is printed on stderr",
    )
    s.add_argument("--skip", type=int, default=0, help="start after this many (the next page)")
    s.add_argument("--all", action="store_true", help="every parked message, no pages")
    s.add_argument(
        "--group",
        action="store_true",
        help="count every parked message by endpoint, message type and error type",
    )
    _poison_show_parser(poison)
    _poison_discard_parser(poison)
    _state_parser(sub)
    add_verify_parser(sub)

    s = sub.add_parser("replay", help="move poison messages back to their queues")
    s.add_argument("endpoints", nargs="*", help="endpoints (default with --all: every one)")
    s.add_argument("--all", action="store_true")
    s.add_argument("--limit", type=int, default=1000, help="per endpoint (default %(default)s)")
    s.add_argument("--id", action="append", default=[], help="only this message id (repeatable)")
    s.add_argument(
        "--type", action="append", default=[], help="only this message type (repeatable)"
    )
    s.add_argument("--dry-run", action="store_true", help="say what would be replayed, move none")
    s.add_argument(
        "--by", help="who replays, in the action journal (default: the user signed in here)"
    )

    _console_parser(sub)

    s = sub.add_parser("cleanup", help="run one cleanup pass now")
    s.add_argument("--grace-seconds", type=float, help="override the grace period")
    s.add_argument("--json", action="store_true", help="the full report as JSON")
    s.add_argument(
        "--wait", action="store_true", help="wait for tasks leased by another live instance"
    )

    # Accepted after the command too, where it leaves a value given before it alone.
    for command in [*sub.choices.values(), *poison.choices.values()]:
        _progress_options(command, default=argparse.SUPPRESS)
    return p


def _poison_list(args: argparse.Namespace, usage: Callable[[str], None]) -> Run:
    if args.page_size < 1 or args.skip < 0:
        usage("--page-size must be at least 1 and --skip not negative")
    everything = args.all or args.group  # a group counts every message, not a page's
    page = poison_commands.ListPage(
        skip=0 if everything else args.skip, size=None if everything else args.page_size
    )
    return lambda w: poison_commands.poison_list_command(
        w,
        args.endpoints or list(w.app.endpoints),
        as_json=args.json,
        page=page,
        grouped=args.group,
    )


def _poison_discard_parser(poison: Any) -> None:
    s = poison.add_parser(
        "discard",
        help="move a poison message to the archive with a reason (kept, not deleted)",
        description="Archive, then delete, the poison messages of ENDPOINT matching every "
        "criterion given (--id, --type, --error-type: at least one); each archive entry keeps "
        "who, when and why for BUS_DISCARD_RETENTION_SECONDS. Exit 1 when none matches.",
    )
    s.add_argument("--queue", required=True, metavar="ENDPOINT", help="e.g. payments")
    s.add_argument("--id", help="message id, or queue message id")
    s.add_argument("--type", help="every parked message of this message type")
    s.add_argument("--error-type", help="every parked message that failed with this error type")
    s.add_argument("--reason", required=True, help="why it is discarded, for the audit")
    s.add_argument("--by", help="who discards it (default: the user signed in here)")


def _poison_show_parser(poison: Any) -> None:
    s = poison.add_parser(
        "show",
        help="one poison message whole: body, reason, history (looked at, not taken)",
        description="ID is the message id `bus send` printed and `bus poison list` lists "
        "(or the queue message id). Exit 1 when no poison message has it.",
    )
    s.add_argument("id", help="message id, as `bus replay --id` takes it")
    s.add_argument("endpoints", nargs="*", help="endpoints to look in (default: every one)")
    s.add_argument("--json", action="store_true", help="machine-readable output, body whole")
    s.add_argument(
        "--body-chars",
        type=int,
        default=poison_show.BODY_CHARS,
        help="print at most this much of the body (default %(default)s)",
    )
    s.add_argument("--body-file", type=Path, metavar="PATH", help="write the whole body here")


def _console_parser(sub: Any) -> None:
    s = sub.add_parser(
        "console",
        help="serve the operator console in the browser until interrupted",
        description="Prints one line, console: http://HOST:PORT/?token=TOKEN, the address to "
        "open (the token is new at each start). Every action is recorded with who did it.",
    )
    s.add_argument(
        "--host",
        default=console_command.DEFAULT_HOST,
        help="address to listen on (default %(default)s: this machine only)",
    )
    s.add_argument(
        "--port",
        type=int,
        default=console_command.DEFAULT_PORT,
        help="port to listen on, 0 for a free one (default %(default)s)",
    )
    s.add_argument(
        "--read-only",
        action="store_true",
        help="show everything, change nothing (also BUS_CONSOLE_READ_ONLY=true)",
    )
    s.add_argument("--by", help="who acts, in the action journal (default: the user signed in)")
    s.add_argument(
        "--system",
        type=Path,
        metavar="FILE",
        help="serve every app the system file lists, each with its own settings, chosen "
        "in the page",
    )


def _state_parser(sub: Any) -> None:
    s = sub.add_parser(
        "state",
        help="an endpoint's rows of one partition, whatever its mode and store (read-only)",
        description="Exit 1 when the partition has no rows.",
    )
    s.add_argument("endpoint", help="e.g. orders")
    s.add_argument("partition", help="the partition key, e.g. order-1")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument(
        "--limit",
        type=int,
        default=state_command.ROW_LIMIT,
        help="show at most this many rows (default %(default)s)",
    )


def _progress_options(p: argparse.ArgumentParser, default: object) -> None:
    bar = p.add_mutually_exclusive_group()
    bar.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=default,
        help="draw progress bars even when stderr is not a terminal",
    )
    bar.add_argument(
        "--no-progress", dest="progress", action="store_false", default=default, help="never"
    )


def _options(args: argparse.Namespace) -> dict[str, str | None]:
    return {STORAGE_SETTING_NAME: args.setting, APP_SETTING: args.app}


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings, with the command-line options first (``shared.settings.PRECEDENCE``). A
    connection string given on the command line is the connection setting's value there: it
    overrides the other sources, which are then not ambiguous."""
    settings = resolve_settings(_options(args), local_file=args.settings_file)
    given = given_connection_string(args)
    if given is None:
        return settings
    options = {**_options(args), settings.storage_setting: given}
    return resolve_settings(options, local_file=args.settings_file)


VISIBLE_KEY_WARNING = (
    "bus: warning: --connection-string puts the storage account key in the process list, "
    "where every user of this machine can read it; set the connection setting in the "
    "environment (AzureWebJobsStorage, or the one --setting names) or use "
    "--connection-string-file PATH"
)


def given_connection_string(args: argparse.Namespace) -> str | None:
    """The connection string from ``--connection-string-file`` or ``--connection-string``
    (warning on stderr for the latter), or None to use the settings."""
    path: Path | None = getattr(args, "connection_string_file", None)
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
            raise ConfigurationError(
                f"cannot read --connection-string-file {path}: {reason}"
            ) from None
        if not text:
            raise ConfigurationError(f"--connection-string-file {path} is empty")
        return text
    if args.connection_string:
        return str(args.connection_string)
    return None


def storage_of(args: argparse.Namespace, config: AppConfig) -> StorageSettings:
    """The storage settings, naming the option when the connection was given with one."""
    storage = config.require_storage()
    if args.connection_string_file is not None:
        option = f"--connection-string-file {args.connection_string_file}"
    elif args.connection_string:
        option = "--connection-string"
    else:
        return storage
    return replace(storage, source=ConnectionSource(option, COMMAND_LINE))


def _body(text: str) -> dict[str, Any]:
    try:
        if text == "@-":
            text = sys.stdin.read()
        elif text.startswith("@"):
            text = Path(text[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise BadRequest(f"cannot read --body {text[:200]!r}: {reason}") from None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise BadRequest(f"--body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadRequest("--body must be a JSON object")
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_delay(text: str) -> timedelta:
    """``--delay``: a number of seconds, or a number with one unit (s, m, h, d)."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise BadRequest(
            f"--delay {text!r} is not a delay: use seconds, or e.g. 90s, 10m, 2h, 30d"
        ) from None
    if not 0 <= value < float("inf"):
        raise BadRequest(f"--delay {text!r}: a delay is a finite, positive time")
    try:
        return timedelta(seconds=value * _UNITS[unit])
    except OverflowError:
        raise BadRequest(f"--delay {text!r} is too long") from None


Run = Callable[[Worker], Awaitable[int]]


def _command(args: argparse.Namespace, usage: Callable[[str], None]) -> Run:
    """The chosen command bound to its arguments (usage errors are raised before any I/O)."""
    c = commands
    if args.command == "provision":
        return lambda w: c.provision_command(w, args.resources_file)
    if args.command in ("send", "publish"):
        body = _body(args.body)
        to = getattr(args, "to", None)
        publish = args.command == "publish"
        delay = None if args.delay is None else parse_delay(args.delay)
        return lambda a: c.send_command(
            a, args.type, body, to=to, key=args.key, publish=publish, delay=delay
        )
    if args.command == "cancel":
        return lambda w: c.cancel_command(w, args.key, scope=args.scope)
    if args.command in ("subscribe", "unsubscribe"):
        everything = getattr(args, "all", False)
        if everything == (args.topic is not None) or (args.topic is None) != (
            args.endpoint is None
        ):
            usage(
                f"{args.command} takes TOPIC ENDPOINT"
                + (" or --all" * (args.command == "subscribe"))
            )
        return lambda a: c.subscribe_command(
            a, args.topic, args.endpoint, subscribe=args.command == "subscribe"
        )
    if args.command == "status":
        return lambda a: c.status_command(
            a, as_json=args.json, check=args.check, progress=args.progress
        )
    if args.command == "poison" and args.poison_command == "show":
        if args.body_chars < 0:
            usage("--body-chars must not be negative")
        return lambda w: poison_show.poison_show_command(
            w,
            args.id,
            args.endpoints or list(w.app.endpoints),
            as_json=args.json,
            body_chars=args.body_chars,
            body_file=args.body_file,
        )
    if args.command == "poison" and args.poison_command == "discard":
        if args.id is None and args.type is None and args.error_type is None:
            usage("discard takes --id, --type or --error-type")
        select = DiscardFilter(args.id, args.type, args.error_type)
        return lambda w: discard_command.discard_command(
            w, args.queue, select, reason=args.reason, by=args.by
        )
    if args.command == "state":
        if args.limit < 1:
            usage("--limit must be at least 1")
        return lambda w: state_command.state_command(
            w, args.endpoint, args.partition, as_json=args.json, limit=args.limit
        )
    if args.command == "poison":
        return _poison_list(args, usage)
    if args.command == "replay":
        if args.all == bool(args.endpoints):
            usage("replay takes endpoint names or --all")
        if args.limit < 1:
            usage("--limit must be at least 1")
        only = poison_commands.PoisonFilter(frozenset(args.id), frozenset(args.type))
        return lambda w: poison_commands.replay_command(
            w,
            list(w.app.endpoints) if args.all else args.endpoints,
            limit=args.limit,
            progress=args.progress,
            only=only if args.id or args.type else None,
            dry_run=args.dry_run,
            by=discard_command.operator_name(args.by),
        )
    if args.command == "console":
        if not 0 <= args.port <= 65535:
            usage("--port must be from 0 to 65535")
        return lambda w: console_command.console_command(
            w, host=args.host, port=args.port, read_only=args.read_only, by=args.by
        )
    if args.command == "resources":
        return c.resources_command
    if args.command != "cleanup":
        usage(f"unknown command {args.command!r}")
    return lambda w: c.cleanup_command(
        w, grace_seconds=args.grace_seconds, as_json=args.json, wait=args.wait
    )


async def _run(args: argparse.Namespace, command: Run) -> int:
    # Every setting is read and checked here, once: a bad value stops the command before it
    # starts, naming the setting (``shared.config``).
    settings = settings_of(args)
    app = configured_app(settings)
    config = build_config(settings, app_name=app.name)
    if args.command in WITHOUT_STORAGE:
        return await command(Worker(app, config))
    config = replace(config, storage=storage_of(args, config))
    required = args.command not in BEFORE_PROVISIONING
    async with opened_worker(app, config, require_resources=required) as worker:
        return await command(worker)


async def _system_command(args: argparse.Namespace, usage: Callable[[str], None]) -> int:
    """``bus status --system FILE`` and ``bus console --system FILE``: the system file names
    each app and its settings, so the options that name one app or one account do not
    apply."""
    given = [
        option
        for option, value in (
            ("--app", args.app),
            ("--setting", args.setting),
            ("--connection-string", args.connection_string),
            ("--connection-string-file", args.connection_string_file),
        )
        if value is not None
    ]
    if given:
        usage(
            f"{args.command} --system takes each app's settings from the system file, "
            f"not {given[0]}"
        )
    if args.command == "console":
        if not 0 <= args.port <= 65535:
            usage("--port must be from 0 to 65535")
        return await console_command.system_console_command(
            args.system, host=args.host, port=args.port, read_only=args.read_only, by=args.by
        )
    return await system_status_command(
        args.system, as_json=args.json, check=args.check, progress=args.progress
    )


VERIFY_ERROR_CHARS = 2000
"""What ``bus verify`` shows of an error that may quote the user's module or data."""


def _verify(args: argparse.Namespace) -> int:
    """``bus verify``: no storage, only the app (an app that cannot be loaded is a
    configuration error, exit 3); inputs it cannot use are bad usage (exit 2)."""
    options = {**_options(args), APP_SETTING: args.verify_app or args.app}
    settings = resolve_settings(options, local_file=args.settings_file)
    app = configured_app(settings)
    try:
        return verify_command(args, app, settings.get(APP_SETTING) or DEFAULT_APP)
    except ConfigurationError as e:
        print(f"bus: verify: {shown(str(e), VERIFY_ERROR_CHARS)}", file=sys.stderr)
        return commands.EXIT_USAGE


def _app_for_help(argv: list[str] | None) -> BusApp | None:
    """The app, read before the full parse so that ``bus send --help`` lists its types; an app
    that cannot be loaded is reported when a command runs."""
    early = argparse.ArgumentParser(add_help=False)
    for option in ("--app", "--setting", "--connection-string", "--connection-string-file"):
        early.add_argument(option)
    early.add_argument("--settings-file", type=Path, default=LOCAL_SETTINGS_FILE)
    try:
        known = early.parse_known_args(argv)[0]
        return configured_app(resolve_settings(_options(known), local_file=known.settings_file))
    except BusError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = parser(_app_for_help(argv))
    args = p.parse_args(argv)
    if args.connection_string:
        print(VISIBLE_KEY_WARNING, file=sys.stderr)
    try:
        if args.command == "verify":
            check_verify_usage(args, p.error)
            code = _verify(args)
        elif getattr(args, "system", None) is not None:
            code = asyncio.run(_system_command(args, p.error))
        else:
            command = _command(args, p.error)
            code = asyncio.run(_run(args, command))
    except BrokenPipeError:
        commands.reader_gone()
        return commands.EXIT_OK
    except (BadRequest, InvalidName, ValueError, MessageTooLarge, CancelRefused) as e:
        # MessageTooLarge here is the input's: the ingress refused it before writing; a
        # cancel refused names a message that cannot be cancelled.
        print(f"bus: {e}", file=sys.stderr)
        return commands.EXIT_USAGE
    except ConfigurationError as e:
        print(f"bus: configuration: {e}", file=sys.stderr)
        return commands.EXIT_CONFIGURATION
    except NotFound as e:
        # Whatever a command needs and storage does not have was never provisioned.
        print(f"bus: {e}: resources missing, run `bus provision`", file=sys.stderr)
        return commands.EXIT_CONFIGURATION
    except (StorageError, OutcomeUnknown, BusError) as e:
        print(f"bus: failed: {e}", file=sys.stderr)
        return commands.EXIT_FAILED
    try:
        sys.stdout.flush()  # here, where a closed pipe can still be handled
    except BrokenPipeError:
        commands.reader_gone()  # the command finished: its verdict stands
    return code
